"""The `gpuwrite model` and `gpuwrite sim` commands, and the benchmark entry point."""
import argparse
import json
from pathlib import Path

import pytest

from gpuwrite.cli import UsageError, model_cmd, sim_cmd
from gpuwrite.model import bench

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments" / "model"


def run_cli(argv, capsys):
    parser = argparse.ArgumentParser(prog="gpuwrite")
    sub = parser.add_subparsers(dest="command")
    model_cmd.register(sub)
    sim_cmd.register(sub)
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def test_model_pcie_json_gives_the_worked_example(capsys):
    code, out = run_cli(["model", "pcie", "--operation", "read", "--size", "512", "--json"], capsys)
    data = json.loads(out)
    assert code == 0
    assert data["data_direction_bytes"] == 552
    assert data["efficiency"] == pytest.approx(512 / 552)


def test_model_path_json_and_table(capsys):
    code, out = run_cli(["model", "--json", "path", "--path", "nic_pull", "--topology", "across_sockets",
                         "--size", "4K"], capsys)
    data = json.loads(out)
    assert code == 0 and data["size_bytes"] == 4096 and data["path_class"] == "across_sockets"
    assert data["latency_ns"] == pytest.approx(sum(step["latency_ns"] for step in data["steps"]))
    code, out = run_cli(["model", "path", "--size", "64"], capsys)
    assert code == 0 and "gpu_push" in out and "doorbell" in out


def test_model_compare_covers_every_topology(capsys):
    code, out = run_cli(["model", "compare", "--sizes", "64,4K", "--json"], capsys)
    rows = json.loads(out)["rows"]
    assert len(rows) == 8
    assert all(row["push_speedup_vs_pull"] > 1 for row in rows)
    assert rows[1]["gpu_push_inline_latency_ns"] is None      # 4 KiB is too large to inline


def test_model_topology_preset(capsys):
    code, out = run_cli(["model", "topology", "--preset", "across_switches", "--json"], capsys)
    assert json.loads(out)["pairs"][0]["class"] == "across_switches"


@pytest.mark.parametrize("argv, named", [
    (["model", "pcie", "--mps", "300"], "--mps=300"),
    (["model", "path", "--size", "4 parsecs"], "'4 parsecs'"),
    (["model", "path", "--path", "gpu_push_inline", "--size", "4096"], "--size=4096"),
    (["model", "topology", "--sysfs", "/nonexistent/sys"], "/nonexistent/sys"),
    (["sim", "/nonexistent/config.toml"], "/nonexistent/config.toml"),
])
def test_bad_input_is_a_usage_error_naming_the_value(argv, named, capsys):
    with pytest.raises(UsageError) as info:
        run_cli(argv, capsys)
    assert named in str(info.value) and "allowed" in str(info.value)


def test_sim_bad_value_in_config_names_it(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text('[params.nic]\npolicy = "maybe"\n')
    with pytest.raises(UsageError, match=r"nic.policy='maybe'.*hold, drop"):
        run_cli(["sim", str(config)], capsys)


def test_sim_runs_an_example_config_and_writes_results(tmp_path, capsys):
    config = EXPERIMENTS / "gpu_push_drop_stall.toml"
    code, out = run_cli(["sim", str(config), "--messages", "3000", "--json", "--out", str(tmp_path / "run")], capsys)
    data = json.loads(out)
    assert code == 0 and data["messages"] == 3000 and data["dropped"] > 0
    assert (tmp_path / "run" / "messages.parquet").is_file()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["dropped"] == data["dropped"]
    # --help names every file --out writes (it once left out summary.parquet and config.toml).
    from gpuwrite.cli import build_parser
    sim_help = " ".join(build_parser()._subparsers._group_actions[0].choices["sim"]
                        .format_help().split())
    for written in sorted(p.name for p in (tmp_path / "run").iterdir()):
        assert written in sim_help, written


def test_benchmark_agrees_and_reports_a_speedup():
    figures = bench.run(messages=20_000, reference_messages=600, seed=2, repeats=2)
    assert figures["agree"] is True
    assert figures["round_robin_agree"] is True
    assert figures["sim_dropped"] == 0
    assert figures["fast_messages_per_s"] > figures["simpy_messages_per_s"]
    assert figures["speedup_same_workload"] > 10
    for key in ("fast_messages_per_s_spread", "simpy_messages_per_s_spread", "speedup_spread"):
        spread = figures[key]
        assert spread["min"] <= spread["median"] <= spread["max"], key


def _strict_json(text):
    """JSON as any parser other than Python's reads it: no NaN, no Infinity."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


ALL_DROPPED = """seed = 1
[params]
path = "gpu_push"
[params.nic]
policy = "drop"
staging_buffer_bytes = 4096
fifo_bytes = 64
[params.network]
vl_buffer_bytes = 4160
[params.receiver]
stall_period_ns = 1000000.0
stall_duration_ns = 999999.0
[workload]
n_messages = 5
n_qps = 1
outstanding = 1
size_kind = "fixed"
size_bytes = 4096
"""


def test_sim_json_is_strict_when_nothing_is_delivered(tmp_path, capsys):
    """Every message dropped: the latencies are unknown, null in the JSON (stdout and
    summary.json), never NaN, which is not JSON."""
    config = tmp_path / "all_dropped.toml"
    config.write_text(ALL_DROPPED)
    code, out = run_cli(["sim", str(config), "--json", "--out", str(tmp_path / "run")], capsys)
    data = _strict_json(out)
    assert code == 0 and data["delivered"] == 0 and data["latency_p50_ns"] is None
    assert _strict_json((tmp_path / "run" / "summary.json").read_text())["latency_max_ns"] is None
