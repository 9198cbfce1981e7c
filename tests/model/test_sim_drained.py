"""``SimResult.drained_gbps``: the delivered bytes until the receiver drained them.

``throughput_gbps`` stops counting when the bytes reach the remote NIC, so a short run into
a receiver slower than the link reported more than the receiver's rate (its docstring says
so); ``drained_gbps`` cannot."""
import argparse
import json

import pytest

from gpuwrite.cli import sim_cmd
from gpuwrite.model import sim
from gpuwrite.model.params import Params, Workload

SLOW = 50.0     # Gb/s: an eighth of the 400 Gb/s link


def _run(drain_gbps: float, n_messages: int, **overrides):
    receiver = {**overrides.pop("receiver", {}), "drain_rate_gbps": drain_gbps}
    params = Params().updated({"receiver": receiver, **overrides})
    return sim.simulate(params, Workload(n_messages=n_messages, size_bytes=4096), 0)


def test_a_short_run_into_a_slow_receiver_drains_at_most_its_rate():
    result = _run(SLOW, 20)
    assert result.params.network.rate_gbps >= 8 * SLOW
    assert result.summary["throughput_gbps"] > 4 * SLOW       # the receive buffer took the rest
    assert result.drained_gbps <= SLOW * (1 + 1e-9)
    assert result.drained_gbps > 0.9 * SLOW                   # and the receiver was kept busy


def test_a_longer_run_into_a_slow_receiver_still_drains_at_most_its_rate():
    result = _run(SLOW, 2000)
    assert result.summary["throughput_gbps"] > SLOW           # 51.0: it converges from above
    assert 0.95 * SLOW < result.drained_gbps <= SLOW * (1 + 1e-9)


@pytest.mark.parametrize("n_messages", [200, 2000])
def test_a_fast_receiver_drains_what_arrives(n_messages):
    result = _run(400.0, n_messages)
    assert result.drained_gbps == pytest.approx(result.summary["throughput_gbps"], rel=0.005)


@pytest.mark.parametrize("overrides", [
    {},
    {"nic": {"policy": "drop"}, "receiver": {"stall_period_ns": 10_000.0, "stall_duration_ns": 5_000.0}},
    {"nic": {"scheduler": "round_robin"}},
    {"path": "nic_pull"},
    {"path": "host_staged"},
], ids=["hold", "drop-stalls", "round-robin", "nic-pull", "host-staged"])
@pytest.mark.parametrize("drain_gbps", [SLOW, 400.0])
def test_drained_never_exceeds_throughput_nor_the_receivers_rate(overrides, drain_gbps):
    """The same bytes from the same start, counted until drained, which comes after reception."""
    result = _run(drain_gbps, 300, **dict(overrides))
    assert result.drained_gbps <= result.summary["throughput_gbps"] * (1 + 1e-12)
    assert result.drained_gbps <= drain_gbps * (1 + 1e-9)


def test_nothing_delivered_drains_nothing():
    params = Params().updated({"nic": {"policy": "drop", "fifo_bytes": 64},
                               "receiver": {"stall_period_ns": 10_000.0, "stall_duration_ns": 9_000.0}})
    result = sim.simulate(params, Workload(n_messages=5, size_bytes=1 << 20), 0)
    assert result.summary["delivered"] == 0 and result.drained_gbps == 0.0


def test_throughput_and_the_summary_are_unchanged():
    """drained_gbps is beside the summary, whose keys are the sweeps' stored table columns."""
    result = _run(SLOW, 20)
    assert "drained_gbps" not in result.summary
    assert result.summary["throughput_gbps"] == pytest.approx(227.33287984234886, rel=1e-12)


SIM_CONFIG = ('seed = 0\n[params]\npath = "gpu_push"\n[params.receiver]\ndrain_rate_gbps = 50.0\n'
              '[workload]\nn_messages = 20\nsize_bytes = 4096\n')


def _sim_cli(argv, capsys):
    parser = argparse.ArgumentParser(prog="gpuwrite")
    sim_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sim", *argv])
    return args.func(args), capsys.readouterr().out


def test_sim_json_shows_drained_beside_throughput_with_the_note(tmp_path, capsys):
    config = tmp_path / "slow.toml"
    config.write_text(SIM_CONFIG)
    code, out = _sim_cli([str(config), "--json", "--out", str(tmp_path / "run")], capsys)
    data = json.loads(out)
    keys = list(data)
    assert code == 0 and keys[keys.index("throughput_gbps") + 1:][:2] == ["drained_gbps", "drained_note"]
    assert data["drained_gbps"] <= SLOW < data["throughput_gbps"]
    assert "remote NIC" in data["drained_note"] and "drained" in data["drained_note"]
    # the files under --out hold the figure, not the note
    stored = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert stored["drained_gbps"] == data["drained_gbps"] and "drained_note" not in stored


def test_sim_text_shows_drained_beside_throughput_with_the_note(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    config = tmp_path / "slow.toml"
    config.write_text(SIM_CONFIG)
    code, out = _sim_cli([str(config)], capsys)
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "throughput_gbps" in line)
    assert code == 0 and "drained_gbps" in lines[at + 1]
    assert any(line.startswith("throughput_gbps counts delivered bytes") for line in lines[at + 2:])
