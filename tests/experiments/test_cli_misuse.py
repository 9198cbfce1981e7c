"""Misuse of the command line the CLI audit found (session 49): a calibration file the model
refuses reaching a sweep, progress on stdout under --json, folders that cannot be written,
a results table another program wrote, abbreviated or valued --json, read errors without
a file name, a folder that is no sysfs tree, a mistyped --results, demo's named paths, and
a --dump of TOML under another suffix. Each is status 2 (1 where stdout itself fails), one
line on stderr naming the option or value, no traceback; under --json, JSON on stdout.
Runs ``main()`` in this process except where stdout must be a real file."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from childenv import child_env

from gpuwrite.cli import UsageError, main
from gpuwrite.cli.common import check_writable

MODEL_SWEEP = '[[sweep]]\nname = "m"\nbackend = "model"\nmeasure = "latency"\n'
POINTS = '[sweep.vary]\nsize_bytes = [64, 4096]\n'
UNWRITABLE_DIR = "/proc/sys/kernel"     # exists; no file can be made in it, not even by root


def _error(capsys, args, status=2) -> tuple[str, dict | None]:
    """``gpuwrite args`` exits ``status`` with one error line and no traceback; returns that
    line and, under --json, the JSON error on stdout."""
    assert main(args) == status
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    as_json = any(arg == "--json" or arg.startswith("--json=") for arg in args)
    assert as_json or out == "", out
    return lines[0], (json.loads(out) if as_json else None)


# 1: a calibration file `model --calibration` refuses, sweep refuses, with the same reason

@pytest.mark.parametrize("body, reason", [
    ('[device]\nname = "cudasim"\nsimulator = true\n[params.gpu]\nstore_rate_gbps = 3.0\n',
     "it was measured on the CUDA simulator"),
    ('[device]\nname = "H100"\nsimulator = false\n[params]\n', "it sets no parameter"),
], ids=["simulator", "empty"])
def test_sweep_refuses_the_calibration_files_model_refuses(body, reason, tmp_path, capsys):
    calibration = tmp_path / "cal.toml"
    calibration.write_text(body)
    line, _ = _error(capsys, ["model", "path", "--calibration", str(calibration)])
    assert reason in line
    spec = tmp_path / "spec.toml"
    spec.write_text(MODEL_SWEEP + f'[sweep.fixed]\ncalibration = "{calibration}"\n' + POINTS)
    line, data = _error(capsys, ["sweep", str(spec), "--results", str(tmp_path / "r"), "--json"])
    assert reason in line and reason in data["error"] and "calibration=" in line
    assert not (tmp_path / "r" / "spec.parquet").exists()


# 2: progress on stderr; stdout holds the JSON document only

def test_calibrate_json_keeps_its_spinner_off_stdout(tmp_path, capsys, monkeypatch):
    """Where stdout is a terminal, `calibrate --json` drew its spinner there."""
    from rich.console import Console

    from gpuwrite.bench import calib

    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))

    def stopped(runs, quick, progress=None):
        if progress:
            progress("measuring")
        raise UsageError("stopped here by the test", value="x", allowed="y")
    monkeypatch.setattr(calib, "calibrate", stopped)
    assert main(["calibrate", "--allow-simulator", "--out", str(tmp_path / "c.toml"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert "calibrating" not in out and json.loads(out)["error"] == "stopped here by the test"


def test_sweep_json_still_reports_progress_on_stderr(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(MODEL_SWEEP + POINTS)
    assert main(["sweep", str(spec), "--results", str(tmp_path / "r"), "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert "2/2" in err, err


# 3: a folder that exists but cannot be written is refused before any work

def test_an_existing_folder_that_cannot_be_written_is_refused_before_the_work(tmp_path, capsys):
    if not Path(UNWRITABLE_DIR).is_dir():
        pytest.skip(f"no {UNWRITABLE_DIR} here")
    with pytest.raises(UsageError, match="--out="):
        check_writable(UNWRITABLE_DIR, "--out", folder=True)
    assert check_writable(tmp_path, "--out", folder=True) == tmp_path and not list(tmp_path.iterdir())
    spec = tmp_path / "spec.toml"
    spec.write_text(MODEL_SWEEP + POINTS)
    line, data = _error(capsys, ["sweep", str(spec), "--results", UNWRITABLE_DIR, "--json"])
    assert f"--results={UNWRITABLE_DIR!r}" in line and data["exit_status"] == 2


# 4: a Parquet file another program wrote, where a stored table belongs

def test_a_results_table_another_program_wrote_is_named(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(MODEL_SWEEP + POINTS)
    (tmp_path / "r").mkdir()
    pd.DataFrame({"topology": ["a"], "latency_ns": [1.0]}).to_parquet(tmp_path / "r" / "spec.parquet")
    line, data = _error(capsys, ["sweep", str(spec), "--results", str(tmp_path / "r"), "--json"])
    assert "spec.parquet" in line and "move this file away" in line and "'sweep'" in line
    assert data["exit_status"] == 2


# 5: --json is matched whole, as main reads it

def test_json_cannot_be_abbreviated_or_given_a_value(capsys):
    line, _ = _error(capsys, ["model", "pcie", "--js"])
    assert "'--js'" in line and "--json" in line
    line, data = _error(capsys, ["model", "pcie", "--json=yes"])
    assert "--json" in line and data["value"] == "yes" and data["exit_status"] == 2


# 6: read errors without a file name; a stdout that cannot be written

@pytest.mark.parametrize("args, option", [(["model", "path", "--config", "/proc/self/mem"], "--config="),
                                          (["sim", "/proc/self/mem"], "/proc/self/mem"),
                                          (["sweep", "/proc/self/mem"], "/proc/self/mem")],
                         ids=["model-config", "sim", "sweep"])
def test_a_file_that_cannot_be_read_is_named(args, option, capsys):
    line, data = _error(capsys, [*args, "--json"])
    assert option in line and "Input/output error" in line and data["exit_status"] == 2


def test_a_stdout_that_cannot_be_written_is_one_line(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "gpuwrite", "model", "pcie", "--json"], stdout=full,
                              stderr=subprocess.PIPE, text=True, env=child_env(), cwd=tmp_path, timeout=120)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "stdout" in done.stderr, done.stderr


# 7: a folder that is no sysfs tree

def test_doctor_refuses_a_folder_that_is_no_sysfs_tree(tmp_path, capsys):
    line, data = _error(capsys, ["doctor", "--sysfs-root", str(tmp_path), "--json"])
    assert "--sysfs-root=" in line and data["exit_status"] == 2


# 8: figures --check of a results folder that does not exist says so

def test_figures_check_names_a_results_folder_that_does_not_exist(tmp_path, capsys):
    missing = tmp_path / "no_such_results"
    assert main(["figures", "--check", "--results", str(missing), "--json"]) == 1   # every table missing
    out, err = capsys.readouterr()
    assert json.loads(out)["stale"] and f"--results={str(missing)!r} does not exist" in err
    assert not missing.exists()


# 9: demo: the four paths named are checked as any named paths are

def test_demo_named_paths_are_checked_even_when_they_are_all_four(capsys):
    for paths in ("gpu_push,gpu_push_inline", "gpu_push,gpu_push_inline,nic_pull,host_staged"):
        line, _ = _error(capsys, ["demo", "--paths", paths, "--sizes", "4K", "--messages", "4"])
        assert "gpu_push_inline" in line and "--sizes='4K'" in line


# 10: model params --dump writes TOML: a name with another suffix is refused

def test_model_params_dump_refuses_a_name_that_is_not_toml(tmp_path, capsys):
    dump = tmp_path / "params.json"
    line, data = _error(capsys, ["model", "params", "--dump", str(dump), "--json"])
    assert "--dump=" in line and ".toml" in data["allowed"] and not dump.exists()


# 11: a model option the model refuses is named as typed (--gen), not as its parameter
# (link.generation); a value --check derives from options names the options it came from

@pytest.mark.parametrize("args, named, value, allowed", [
    (["model", "pcie", "--gen", "0"], "--gen=0 is not allowed; allowed: 1, 2", 0, "1, 2, 3, 4, 5, 6"),
    (["model", "pcie", "--start", "-1"], "--start=-1 is not allowed; allowed: an integer >= 0", -1, ">= 0"),
    (["model", "pcie", "--mps", "3"], "--mps=3 is not allowed; allowed: 128", 3, "128, 256"),
    (["model", "path", "--gen", "0"], "--gen=0 is not allowed; allowed: 1, 2", 0, "1, 2, 3, 4, 5, 6"),
    (["model", "path", "--path", "gpu_push_inline", "--size", "4K"], "--size=4K is not allowed (4,096 bytes)",
     "4K", "inline_max_bytes"),
    (["model", "buffer", "--share", "1e-300", "--check", "--topology", "same_switch"],
     "--share=1e-300 with --size=4096 is not allowed", "1e-300", "a larger --share"),
], ids=["pcie-gen", "pcie-start", "pcie-mps", "path-gen", "path-inline-size", "buffer-share-interval"])
def test_model_errors_name_the_option_as_typed(args, named, value, allowed, capsys):
    line, data = _error(capsys, [*args, "--json"])
    assert named in line, line
    assert line.split(": error: ", 1)[1].startswith("--"), line     # the option first
    assert data["value"] == value and allowed in data["allowed"] and data["exit_status"] == 2


# 12: JSON value and allowed of errors whose message states them

def test_emulated_sweep_refusals_fill_value_and_allowed(tmp_path, capsys):
    spec = tmp_path / "emu.toml"
    for fixed, size, value, allowed in (("block_threads = 100000", 64, 100000, "1 to 512"),
                                        ('path = "gpu_push_inline"', 4096, 4096, "at most 476")):
        spec.write_text(f'[[sweep]]\nname = "e"\nbackend = "emulated"\n[sweep.fixed]\n{fixed}\n'
                        f'simulator_messages = 1\n[sweep.vary]\nsize_bytes = [{size}]\n')
        line, data = _error(capsys, ["sweep", str(spec), "--results", str(tmp_path / "r"), "--json"])
        assert f"={value} is not allowed" in line and data["value"] == value and allowed in data["allowed"]


def test_malformed_experiment_file_fills_value_and_allowed(tmp_path, capsys):
    spec = tmp_path / "bad.toml"
    spec.write_text("[sweep\n")
    line, data = _error(capsys, ["sweep", str(spec), "--results", str(tmp_path / "r"), "--json"])
    assert "not valid TOML" in line and data["value"] == str(spec) and "TOML" in data["allowed"]


def test_sim_without_config_fills_value_and_allowed(capsys):
    line, data = _error(capsys, ["sim", "--json"])
    assert "CONFIG" in line and data["value"] == "CONFIG" and "TOML" in data["allowed"]


# 13: --help shows no reStructuredText ``literals`` (descriptions are the modules' docstrings)

def test_help_has_no_doubled_backticks():
    from gpuwrite.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    helps = [parser.format_help(), *(sub.format_help() for sub in commands.values())]
    helps += [leaf.format_help() for leaf in commands["model"]._subparsers._group_actions[0].choices.values()]
    assert not [text.splitlines()[2] for text in helps if "``" in text]
    assert "gpuwrite model: single analytical answers" in commands["model"].format_help()


# A GPU older than the device verbs allow: exit 3 naming it, before any run, not a
# traceback from the first Context

@pytest.mark.parametrize("argv", [["demo", "--messages", "1", "--json"], ["bench", "--json"]])
def test_a_gpu_too_old_is_no_usable_gpu(argv, capsys, monkeypatch):
    import gpuwrite.cudaenv as cudaenv

    def too_old(device=None):
        raise RuntimeError("GPU Tesla T4 has compute capability 7.5; gpuwrite's device verbs need 8.0 "
                           "or newer (cp.async): use a newer GPU, or the CUDA simulator")

    monkeypatch.setattr(cudaenv, "check_capability", too_old)
    if argv[0] == "bench":       # bench refuses the simulator first: look past that check
        monkeypatch.setattr(cudaenv, "SIMULATOR", False)
    assert main(argv) == 3
    data = json.loads(capsys.readouterr().out)
    assert "compute capability 7.5" in data["error"] and data["exit_status"] == 3
    assert "8.0 or newer" in data["allowed"]
