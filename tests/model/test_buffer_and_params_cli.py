"""The hold-buffer closed form against the simulator, and `gpuwrite model buffer / params`."""
import argparse
import json

import pytest

from gpuwrite.cli import UsageError, model_cmd
from gpuwrite.model import buffer, paths
from gpuwrite.model.params import Params


def run_cli(argv, capsys):
    parser = argparse.ArgumentParser(prog="gpuwrite")
    model_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args), capsys.readouterr().out

STALLS = {"receiver": {"stall_period_ns": 80_000.0, "stall_duration_ns": 20_000.0}}


def test_buffer_closed_form_is_littles_law_on_the_staging_loop():
    params = Params()
    result = buffer.need(params, 0.5)
    timing = paths.path_timing("gpu_push", params.build_topology(), 4096, params)
    loop_ns = (timing.stage_ns("pre") + timing.stage_ns("ingress") + timing.stage_ns("post")
               + timing.wire_busy_ns + timing.staging_return_ns)
    rate_bytes_per_ns = 0.5 * 4096 / timing.wire_busy_ns
    assert result.staging_loop_ns == pytest.approx(loop_ns)
    assert result.loop_bytes == pytest.approx(rate_bytes_per_ns * loop_ns)
    assert result.stall_backlog_bytes == 0          # no stalls: the VL buffer covers the credit loop
    assert result.buffer_bytes == -(-result.loop_bytes // 4096) * 4112


def test_buffer_backlog_is_what_a_stall_pushes_beyond_the_free_credits():
    params = Params().updated(STALLS)
    result = buffer.need(params, 0.5)
    x = result.target_gbps / 8
    vl_payload = params.network.vl_buffer_bytes * 4096 / (65 * 64)    # 4138 B of packet in 65 credit blocks
    assert result.stall_backlog_bytes == pytest.approx(x * (20_000.0 + result.credit_loop_ns) - vl_payload)
    assert not buffer.need(params, 0.9).feasible and buffer.need(params, 0.9).limit == "receiver"


@pytest.mark.parametrize("topology", ["same_switch", "across_sockets"])
@pytest.mark.parametrize("stalls", [{}, STALLS], ids=["steady", "stalls"])
def test_the_simulator_sustains_the_share_with_that_buffer_and_not_with_less(topology, stalls):
    params = Params(topology=topology).updated(stalls) if stalls else Params(topology=topology)
    result = buffer.need(params, 0.7)
    wire_ns = 4138 * 8 / params.network.rate_gbps
    assert buffer.longest_gpu_wait_ns(params, result.buffer_bytes, 0.7) <= wire_ns   # never throttled
    assert buffer.longest_gpu_wait_ns(params, int(0.8 * result.buffer_bytes), 0.7) > 10 * wire_ns


def test_model_buffer_command(capsys):
    code, out = run_cli(["model", "--json", "buffer", "--share", "0.5", "--topology", "same_switch",
                         "--stall-period", "80000", "--stall-duration", "20000", "--check"], capsys)
    row = json.loads(out)["rows"][0]
    assert code == 0 and row["feasible"] and row["simulated_longest_gpu_wait_ns"] < 100
    assert row["buffer_bytes"] == buffer.need(Params().updated(STALLS), 0.5).buffer_bytes
    with pytest.raises(UsageError, match=r"share=1.5.*\(0, 1\]"):
        run_cli(["model", "buffer", "--share", "1.5"], capsys)


def test_model_params_prints_every_value_with_its_source_and_dumps_a_config(tmp_path, capsys):
    dump = tmp_path / "all.toml"
    code, out = run_cli(["model", "--json", "params", "--dump", str(dump)], capsys)
    rows = json.loads(out)["parameters"]
    assert code == 0 and len(rows) == len(Params().flat())
    assert all(row["source"] and "no source" not in row["source"] for row in rows)
    by_name = {row["parameter"]: row for row in rows}
    assert "pcie-bench/data" in by_name["platform.socket_link_latency_ns"]["source"]
    assert Params.from_toml(dump) == Params()
    text = dump.read_text().replace("switch_latency_ns = 150.0", "switch_latency_ns = 90.0")
    dump.write_text(text)
    code, out = run_cli(["model", "--json", "params", "--config", str(dump)], capsys)
    by_name = {row["parameter"]: row for row in json.loads(out)["parameters"]}
    assert by_name["platform.switch_latency_ns"]["value"] == 90.0
    assert "config file" in by_name["platform.switch_latency_ns"]["source"]
    assert Params.from_toml(dump).build_topology().node("sw0").latency_ns == 90.0
    # a calibration over a config that sets every key: its keys are its own, in value and source
    calibration = tmp_path / "cal.toml"
    calibration.write_text("[device]\nname = \"Test GPU\"\n[params.gpu]\nstore_rate_gbps = 123.0\n")
    code, out = run_cli(["model", "--json", "params", "--config", str(dump), "--calibration", str(calibration)],
                        capsys)
    by_name = {row["parameter"]: row for row in json.loads(out)["parameters"]}
    assert by_name["gpu.store_rate_gbps"]["value"] == 123.0
    assert by_name["gpu.store_rate_gbps"]["source"] == f"calibration file {calibration}"
    assert "config file" in by_name["platform.switch_latency_ns"]["source"]


@pytest.mark.parametrize("argv, named", [
    (["--stall-duration", "20000"], "--stall-duration=20000"),
    (["--stall-period", "50000"], "--stall-period=50000"),
    (["--stall-period", "0", "--stall-duration", "100"], "--stall-duration=100"),
])
def test_model_buffer_refuses_half_a_stall(argv, named, capsys):
    """A stall needs a period and a duration: with one of them the model has no stall,
    which the command used to answer for without a word."""
    with pytest.raises(UsageError, match=named + r" is not allowed without --stall-"):
        run_cli(["model", "buffer", "--topology", "same_switch", *argv], capsys)


def test_model_buffer_stall_option_keeps_the_config_files_other_half(tmp_path, capsys):
    """--stall-duration over a --config that sets the period: the period stays (it was set
    to 0, so the receiver never stalled)."""
    config = tmp_path / "stalls.toml"
    config.write_text("[receiver]\nstall_period_ns = 80000.0\nstall_duration_ns = 20000.0\n")
    code, out = run_cli(["model", "--json", "buffer", "--share", "0.5", "--topology", "same_switch",
                         "--config", str(config), "--stall-duration", "10000"], capsys)
    row = json.loads(out)["rows"][0]
    expected = Params().updated({"receiver": {"stall_period_ns": 80_000.0, "stall_duration_ns": 10_000.0}})
    assert code == 0 and row["stall_ns"] == 10_000
    assert row["buffer_bytes"] == buffer.need(expected, 0.5).buffer_bytes


def test_model_buffer_check_refuses_a_simulation_past_the_bound(capsys):
    """--check with a stall period of 1000 s simulated six of them message by message: it
    tried to allocate 54 GiB and ended in a traceback. It is refused before any simulation."""
    with pytest.raises(UsageError, match=r"--check with a stall period of 1e\+12 ns.*at most 10,000,000"):
        run_cli(["model", "buffer", "--topology", "same_switch", "--share", "0.1", "--stall-period", "1e12",
                 "--stall-duration", "5e11", "--check"], capsys)


def test_model_params_names_the_command_line_as_a_values_source(tmp_path, capsys):
    """--gen 4 over a --config: the value is the option's, and so is its source (it gave the
    default's source, a calibration of a Gen5 link, beside the value 4)."""
    config = tmp_path / "gen3.toml"
    config.write_text("[link]\ngeneration = 3\nwidth = 8\n")
    code, out = run_cli(["model", "--json", "params", "--config", str(config), "--gen", "4", "--mps", "512"], capsys)
    by_name = {row["parameter"]: row for row in json.loads(out)["parameters"]}
    assert code == 0
    assert by_name["link.generation"] == {"parameter": "link.generation", "value": 4, "source": "command line --gen"}
    assert by_name["link.mps_bytes"]["source"] == "command line --mps"
    assert by_name["link.width"] == {"parameter": "link.width", "value": 8, "source": f"config file {config}"}
