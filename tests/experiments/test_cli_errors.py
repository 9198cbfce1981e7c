"""Every bad input a researcher may type, through the one error path of ``gpuwrite``:
exit status 2, one line on stderr naming the value, no traceback; under ``--json`` the
same error as a JSON object on stdout. Runs ``main()`` in this process (a subprocess per
case would import numba each time) except where the environment must differ."""
import json
import subprocess
import sys
from pathlib import Path

from childenv import child_env

import pytest

from gpuwrite.cli import Terminated, main
from gpuwrite.cudaenv import SIMULATOR

from tiny_specs import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[2]
# Where the gpuwrite this test imported lives (site-packages under README's `pytest -P`,
# the checkout when the extension was built in place): child processes import the same one.


def _spec(tmp: Path, vary_size: str) -> str:
    """fig1's experiment file with its size range replaced."""
    text = (EXPERIMENTS / "fig1_latency.toml").read_text()
    text = text.replace("size_bytes = { from = 64, to = 1048576, factor = 2 }", f"size_bytes = {vary_size}")
    assert vary_size in text
    path = tmp / "spec.toml"
    path.write_text(text)
    return str(path)


def _file(tmp: Path, name: str, content) -> str:
    """A file of ``content`` (text, or bytes as they are) in the tmp folder."""
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def _sweep(tmp: Path, body: str, measure: str | None = "simulate") -> list[str]:
    """``gpuwrite sweep`` of a one-sweep experiment file: ``body`` after its first lines."""
    head = '[[sweep]]\nname = "s"\nbackend = "model"\n' + (f'measure = "{measure}"\n' if measure else "")
    if measure is None:
        head = '[[sweep]]\nname = "s"\nbackend = "emulated"\n'
    return ["sweep", _file(tmp, "spec.toml", head + body), "--results", str(tmp / "r")]


def _not_a_table(tmp: Path, name: str) -> str:
    """A results folder whose stored table ``name`` is no Parquet file (cut short, or a Git
    LFS pointer); returns the folder."""
    path = tmp / "r" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("version https://git-lfs.github.com/spec/v1\n")
    return str(tmp / "r")


# (id, argv builder given a tmp folder, text the message must contain)
CASES = [
    ("demo-messages-zero", lambda t: ["demo", "--messages", "0"], "--messages=0"),
    ("demo-messages-huge", lambda t: ["demo", "--messages", "10000000000"], "10000000000"),
    ("demo-sizes-huge", lambda t: ["demo", "--sizes", "1000000000000"], "1000000000000"),
    ("demo-sizes-text", lambda t: ["demo", "--sizes", "4K,lots"], "lots"),
    ("demo-sizes-empty", lambda t: ["demo", "--sizes", ","], "--sizes"),
    ("demo-inline-too-big", lambda t: ["demo", "--paths", "gpu_push_inline", "--sizes", "1K"], "1K"),
    ("demo-paths-empty", lambda t: ["demo", "--paths", ""], "--paths=''"),
    ("demo-path-unknown", lambda t: ["demo", "--paths", "gpu_push,warp"], "warp"),
    ("demo-seed-negative", lambda t: ["demo", "--seed", "-1"], "--seed=-1"),
    ("demo-qps-zero", lambda t: ["demo", "--qps", "0"], "--qps=0"),
    ("demo-batch-huge", lambda t: ["demo", "--batch", "1000"], "--batch=1000"),
    ("demo-payload-too-big", lambda t: ["demo", "--messages", "100000", "--sizes", "64KiB",
                                        "--paths", "gpu_push"], "100000"),
    ("demo-out-suffix", lambda t: ["demo", "--out", str(t / "rows.txt")], "rows.txt"),
    ("demo-messages-not-int", lambda t: ["demo", "--messages", "many"], "many"),
    ("demo-policy", lambda t: ["demo", "--policy", "lossy"], "lossy"),
    ("unknown-command", lambda t: ["frobnicate"], "frobnicate"),
    ("no-command", lambda t: [], "COMMAND; allowed: demo, bench, model, sim"),
    ("model-no-question", lambda t: ["model"], "QUESTION; allowed: path, compare, pcie"),
    ("doctor-size-huge", lambda t: ["doctor", "--size", "10000000000"], "10000000000"),
    ("doctor-size-unit", lambda t: ["doctor", "--size", "4Q"], "4Q"),
    ("doctor-proc-missing", lambda t: ["doctor", "--proc-root", str(t / "nonexistent")], "nonexistent"),
    ("doctor-sysfs-missing", lambda t: ["doctor", "--sysfs-root", str(t / "nosys")], "nosys"),
    ("sweep-from-negative", lambda t: ["sweep", _spec(t, "{ from = -64, to = 4096, factor = 2 }"),
                                       "--results", str(t / "r")], "from=-64"),
    ("sweep-range-huge", lambda t: ["sweep", _spec(t, "{ from = 1, to = 1000000000000, step = 1 }"),
                                    "--results", str(t / "r")], "1000000000000"),
    ("sweep-size-huge", lambda t: ["sweep", _spec(t, "[64, 100000000000]"), "--results", str(t / "r")],
     "100000000000"),
    ("sweep-missing-file", lambda t: ["sweep", str(t / "nope.toml")], "nope.toml"),
    ("sweep-results-unwritable", lambda t: ["sweep", str(EXPERIMENTS / "fig1_latency.toml"),
                                            "--results", "/proc/nope"], "/proc/nope"),
    ("sweep-results-is-file", lambda t: ["sweep", str(EXPERIMENTS / "fig1_latency.toml"),
                                         "--results", str(ROOT / "README.md")], "README.md"),
    ("sweep-out-unwritable", lambda t: ["sweep", str(EXPERIMENTS / "fig1_latency.toml"),
                                        "--out", "/proc/nope/rows.csv"], "/proc/nope/rows.csv"),
    ("sweep-workers-zero", lambda t: ["sweep", str(EXPERIMENTS / "fig1_latency.toml"), "--workers", "0"],
     "--workers=0"),
    ("figures-out-is-file", lambda t: ["figures", "--out", str(ROOT / "README.md")], "README.md"),
    ("figures-results-empty", lambda t: ["figures", "--results", ""], "--results=''"),
    ("figures-only-unknown", lambda t: ["figures", "--specs", str(EXPERIMENTS), "--results", str(t / "r"),
                                        "--out", str(t / "f"), "--only", "fig9"], "fig9"),
    ("sim-out-is-file", lambda t: ["sim", str(EXPERIMENTS / "model" / "gpu_push_inline_small.toml"),
                                   "--messages", "20", "--out", str(ROOT / "README.md")], "README.md"),
    ("sim-missing-config", lambda t: ["sim", str(t / "none.toml")], "none.toml"),
    # model and sim: parameter files, and values the model's classes do not check themselves
    ("model-config-not-utf8", lambda t: ["model", "path", "--config", _file(t, "binary.toml", b"\xff\xfe")],
     "binary.toml"),
    ("model-config-empty-name", lambda t: ["model", "params", "--config", ""], "--config=''"),
    ("model-calibration-empty-name", lambda t: ["model", "path", "--calibration", ""], "--calibration=''"),
    ("model-calibration-not-utf8", lambda t: ["model", "compare", "--calibration", _file(t, "cal.toml", b"\xff")],
     "cal.toml"),
    ("model-calibration-params-not-table", lambda t: ["model", "path", "--calibration",
                                                      _file(t, "cal.toml", 'params = "fast"\n')], "params='fast'"),
    ("model-calibration-device-not-table", lambda t: ["model", "params", "--calibration",
                                                      _file(t, "cal.toml", 'device = "H100"\n[params.gpu]\n'
                                                                           'store_rate_gbps = 100.0\n')],
     "device='H100'"),
    ("model-config-nan", lambda t: ["model", "path", "--config", _file(t, "p.toml", "[link]\ngeneration = nan\n")],
     "link.generation=nan"),
    ("model-config-topology-not-text", lambda t: ["model", "params", "--config", _file(t, "p.toml", "topology = 5\n")],
     "topology=5"),
    ("model-topology-preset-and-sysfs", lambda t: ["model", "topology", "--preset", "across_sockets", "--sysfs",
                                                   "/sys/devices"], "--preset"),
    ("model-topology-sysfs-blank", lambda t: ["model", "topology", "--sysfs", " "], "--sysfs=' '"),
    ("model-dump-empty-name", lambda t: ["model", "params", "--dump", ""], "--dump=''"),
    ("model-buffer-stall-nan", lambda t: ["model", "buffer", "--stall-period", "nan"], "--stall-period=nan"),
    ("model-buffer-poll-inf", lambda t: ["model", "buffer", "--poll-interval", "inf"], "--poll-interval=inf"),
    ("model-pcie-start-huge", lambda t: ["model", "pcie", "--start", str(2**70)], f"--start={2**70}"),
    ("sim-config-not-utf8", lambda t: ["sim", _file(t, "binary.toml", b"\xff\xfe")], "binary.toml"),
    ("sim-config-nan", lambda t: ["sim", _file(t, "c.toml", '[workload]\narrival = "open"\ninterval_ns = nan\n')],
     "workload.interval_ns=nan"),
    ("sim-config-inf-rate", lambda t: ["sim", _file(t, "c.toml", "[params.network]\nrate_gbps = inf\n")],
     "network.rate_gbps=inf"),
    ("sim-config-weights-not-numbers", lambda t: ["sim", _file(t, "c.toml", '[workload]\narrival = "open"\n'
                                                               'qp_weights = ["a"]\n')], "workload.qp_weights=['a']"),
    ("sim-config-topology-not-text", lambda t: ["sim", _file(t, "c.toml", "[params]\ntopology = 5\n")], "topology=5"),
    ("sim-config-size-huge", lambda t: ["sim", _file(t, "c.toml", "[workload]\nsize_bytes = 9223372036854775807\n")],
     "workload.size_bytes=9223372036854775807"),
    ("sim-config-qps-huge", lambda t: ["sim", _file(t, "c.toml", "[workload]\nn_qps = 9223372036854775807\n")],
     "workload.n_qps=9223372036854775807"),
    ("sim-config-outstanding-huge", lambda t: ["sim", _file(t, "c.toml", "[workload]\noutstanding = 1000000000\n")],
     "workload.outstanding=1000000000"),
    ("sim-messages-huge", lambda t: ["sim", str(EXPERIMENTS / "model" / "gpu_push_inline_small.toml"),
                                     "--messages", str(2**70)], f"workload.n_messages={2**70}"),
    ("sim-out-empty-name", lambda t: ["sim", str(EXPERIMENTS / "model" / "gpu_push_inline_small.toml"),
                                      "--messages", "20", "--out", ""], "--out=''"),
    # figures --check checks the options it does not use too, and makes no folder
    ("figures-check-only-unknown", lambda t: ["figures", "--check", "--specs", str(EXPERIMENTS), "--results",
                                             str(t / "r"), "--only", "fig99"],
     "fig99"),
    ("figures-check-fresh", lambda t: ["figures", "--check", "--fresh", "--results", str(t / "r")],
     "--check with --fresh"),
    ("figures-check-workers-zero", lambda t: ["figures", "--check", "--results", str(t / "r"), "--workers", "0"],
     "--workers=0"),
    ("figures-check-specs-without-figures", lambda t: ["figures", "--check", "--specs", str(t), "--results",
                                                       str(t / "r")], "--specs="),
    ("figures-specs-without-figures", lambda t: ["figures", "--specs", str(t), "--results", str(t / "r"),
                                                 "--out", str(t / "f")], "--specs="),
    ("figures-check-specs-empty", lambda t: ["figures", "--check", "--specs", "", "--results", str(t / "r")],
     "--specs=''"),
    ("sweep-stored-table-not-parquet", lambda t: [*_sweep(t, '[sweep.fixed]\nsize_bytes = 64\n', "latency"),
                                                  "--results", _not_a_table(t, "spec.parquet")], "spec.parquet"),
    ("sweep-cached-chunk-not-parquet", lambda t: [*_sweep(t, '[sweep.fixed]\nsize_bytes = 64\n', "latency"),
                                                  "--results", _not_a_table(t, "cache/spec/0.parquet")],
     "0.parquet"),
    ("figures-check-stored-table-not-parquet", lambda t: ["figures", "--check", "--specs", str(EXPERIMENTS),
                                                          "--only", "fig2_pcie_efficiency", "--results",
                                                          _not_a_table(t, "fig2_pcie_efficiency.parquet")],
     "fig2_pcie_efficiency.parquet"),
    ("figures-check-out-empty", lambda t: ["figures", "--check", "--results", str(t / "r"), "--out", ""], "--out=''"),
    ("doctor-sysfs-root-empty", lambda t: ["doctor", "--sysfs-root", ""], "--sysfs-root=''"),
    ("doctor-proc-root-empty", lambda t: ["doctor", "--proc-root", ""], "--proc-root=''"),
    # checked before calibrate and bench look for a GPU
    ("calibrate-runs-huge", lambda t: ["calibrate", "--runs", str(2**70)], f"--runs={2**70}"),
    ("calibrate-out-empty", lambda t: ["calibrate", "--allow-simulator", "--out", ""], "--out=''"),
    ("calibrate-out-not-toml", lambda t: ["calibrate", "--allow-simulator", "--out", str(t / "c.json")],
     "c.json"),
    ("bench-qps-huge", lambda t: ["bench", "--qps", str(2**70)], str(2**70)),
    ("bench-iters-huge", lambda t: ["bench", "--iters", str(2**70)], str(2**70)),
    ("bench-repeats-huge", lambda t: ["bench", "--repeats", str(2**70)], str(2**70)),
    # the option as typed, and one bound however far off the value is
    ("bench-threads-zero", lambda t: ["bench", "--threads", "0"], "--threads='0' is not allowed; allowed: 1 to "),
    ("bench-qps-zero", lambda t: ["bench", "--qps", "0"], "--qps='0'"),
    ("bench-path-unknown", lambda t: ["bench", "--paths", "gpu_push,warp"], "--paths: path='warp'"),
    # named, inline would have been left out of the sweep at sizes it cannot carry
    ("bench-inline-too-large", lambda t: ["bench", "--paths", "gpu_push_inline", "--sizes", "64,1MiB"],
     "--sizes=1048576 is not allowed; allowed: at most 448 B with --paths gpu_push_inline"),
    # testbed: checked before any device is probed
    ("testbed-seed-negative", lambda t: ["testbed", "--seed", "-1"], "--seed -1"),
    ("testbed-bootstrap-timeout-inf", lambda t: ["testbed", "--bootstrap-timeout", "inf"], "--bootstrap-timeout inf"),
    ("testbed-device-empty", lambda t: ["testbed", "--device", ""], "--device ''"),
    ("testbed-payload-past-the-bound", lambda t: ["testbed", "--messages", "10000000"],
     "--messages 10000000"),
    # experiment files: what the model's classes and the runner do not check themselves
    ("sweep-file-not-utf8", lambda t: ["sweep", _file(t, "binary.toml", b"\xff\xfe[[sweep]]")], "binary.toml"),
    ("sweep-figure-not-table", lambda t: ["sweep", _file(t, "fig.toml", 'figure = 3\n[[sweep]]\nname = "s"\n'
                                                         'backend = "model"\nmeasure = "latency"\n')], "figure=3"),
    ("sweep-name-not-text", lambda t: ["sweep", _file(t, "name.toml", '[[sweep]]\nname = ["a"]\nbackend = "model"\n'
                                                      'measure = "latency"\n')], "name=['a']"),
    ("sweep-nan-parameter", lambda t: _sweep(t, '[sweep.fixed]\n"network.rate_gbps" = nan\n'), "network.rate_gbps=nan"),
    ("sweep-inf-interval", lambda t: _sweep(t, '[sweep.fixed]\n"workload.arrival" = "open"\n'
                                               '"workload.interval_ns" = inf\n'), "workload.interval_ns=inf"),
    ("sweep-topology-not-text", lambda t: _sweep(t, "[sweep.fixed]\ntopology = 5\n"), "topology=5"),
    ("sweep-calibration-not-text", lambda t: _sweep(t, "[sweep.fixed]\ncalibration = 5\n"), "calibration=5"),
    ("sweep-calibration-not-utf8", lambda t: _sweep(t, '[sweep.fixed]\ncalibration = "%s"\n'
                                                       % _file(t, "c.toml", b"\xff")), "c.toml"),
    ("sweep-calibration-params-not-table", lambda t: _sweep(t, '[sweep.fixed]\ncalibration = "%s"\n'
                                                              % _file(t, "c.toml", "params = 5\n")), "params=5"),
    ("sweep-n-qps-huge", lambda t: _sweep(t, '[sweep.fixed]\n"workload.n_qps" = 9223372036854775807\n'),
     "workload.n_qps=9223372036854775807"),
    ("sweep-n-messages-huge", lambda t: _sweep(t, '[sweep.fixed]\n"workload.n_messages" = 9223372036854775807\n'),
     "workload.n_messages=9223372036854775807"),
    ("sweep-weights-not-numbers", lambda t: _sweep(t, '[sweep.fixed]\n"workload.arrival" = "open"\n'
                                                      '"workload.qp_weights" = ["a"]\n'), "workload.qp_weights=['a']"),
    ("sweep-samples-text", lambda t: _sweep(t, '[sweep.fixed]\nsamples = "x"\n'), "samples='x'"),
    ("sweep-start-address-huge", lambda t: _sweep(t, "[sweep.fixed]\nstart_address = 1180591620717411303424\n",
                                                  "efficiency"), "start_address=1180591620717411303424"),
    ("sweep-emulated-slot-zero", lambda t: _sweep(t, "[sweep.fixed]\nstage_slot_bytes = 0\n", None),
     "stage_slot_bytes=0"),
    ("sweep-emulated-wait-each-text", lambda t: _sweep(t, '[sweep.fixed]\nwait_each = "yes"\n', None),
     "wait_each='yes'"),
    ("sweep-emulated-seed-negative", lambda t: _sweep(t, "[sweep.fixed]\nseed = -1\n", None), "seed=-1"),
    ("sweep-emulated-seed-past-64-bits", lambda t: _sweep(t, f"[sweep.fixed]\nseed = {2**64}\n", None),
     f"seed={2**64}"),
    ("sim-seed-past-64-bits", lambda t: ["sim", str(EXPERIMENTS / "model" / "gpu_push_inline_small.toml"),
                                         "--messages", "20", "--seed", str(2**70)], f"seed={2**70}"),
    ("sweep-emulated-payload-past-1GiB", lambda t: _sweep(t, "[sweep.fixed]\nsize_bytes = 1048576\n"
                                                         "messages = 1025\n", None), "size_bytes=1048576"),
    ("sweep-emulated-qps-past-the-table", lambda t: _sweep(t, "[sweep.fixed]\nn_qps = 4097\n", None),
     "n_qps=4097"),
]
if SIMULATOR:   # without a GPU these commands refuse, and must say so in JSON too
    CASES += [
        ("calibrate-out-unwritable", lambda t: ["calibrate", "--allow-simulator", "--quick", "--runs", "1",
                                                "--out", "/proc/nope.toml"], "/proc/nope.toml"),
    ]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("name, argv, named", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_naming_the_value(name, argv, named, as_json, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = argv(tmp_path) + (["--json"] if as_json else [])
    assert_one_error_line(args, named, capsys)


def assert_one_error_line(args: list[str], named: str, capsys) -> None:
    """``gpuwrite args`` is a usage error: status 2, no traceback, one error line on stderr
    naming ``named``; under ``--json`` the JSON error (its error, value and what is allowed,
    and status 2) on stdout, else nothing there (test_cli_probes.py checks its cases so too)."""
    assert main(args) == 2, capsys.readouterr()
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and named in errors[0], err
    if "--json" in args:
        data = json.loads(out)
        assert set(data) >= {"error", "value", "allowed"} and named in data["error"], out
        assert data["exit_status"] == 2 and data["allowed"], out
    else:
        assert out == "", out


def test_argparse_errors_are_json_under_json(capsys):
    assert main(["demo", "--messages", "many", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["value"] == "many" and data["allowed"] == "int"


@pytest.mark.parametrize("stop, status", [(KeyboardInterrupt, 130), (Terminated, 143)], ids=["sigint", "sigterm"])
def test_an_interrupted_command_under_json_still_prints_json(stop, status, capsys, monkeypatch):
    """Ctrl-C or SIGTERM under --json: the one line on stderr, and a JSON error on stdout
    (it printed nothing there, which no JSON reader takes)."""
    from gpuwrite.cli import model_cmd

    def interrupted(args):
        raise stop()
    monkeypatch.setattr(model_cmd, "cmd_pcie", interrupted)
    assert main(["model", "pcie", "--json"]) == status
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    data = json.loads(out)
    assert data["exit_status"] == status and data["error"] in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("gpuwrite ")


def test_no_gpu_when_a_gpu_is_demanded_is_one_line(tmp_path):
    """NUMBA_ENABLE_CUDASIM=0 on a machine without a GPU: one line, exit 3, JSON too."""
    if not SIMULATOR:
        pytest.skip("this machine has a GPU")
    env = child_env(NUMBA_ENABLE_CUDASIM="0")
    done = subprocess.run([sys.executable, "-m", "gpuwrite", "demo", "--messages", "4", "--json"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "NUMBA_ENABLE_CUDASIM" in json.loads(done.stdout)["error"]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("argv", [["bench"], ["calibrate"]], ids=["bench", "calibrate"])
def test_a_command_that_measures_a_gpu_exits_3_on_the_simulator(argv, as_json, capsys):
    """bench and calibrate measure a real GPU: on the CUDA simulator they refuse with one
    line and exit status 3 (no usable GPU), as a command that finds no driver does; bad
    options are still status 2 (checked first, in the cases above)."""
    if not SIMULATOR:
        pytest.skip("this machine has a GPU")
    assert main(argv + (["--json"] if as_json else [])) == 3
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert "Traceback" not in err and len(errors) == 1 and "NUMBA_ENABLE_CUDASIM=1" in errors[0], err
    if as_json:
        data = json.loads(out)
        assert data["exit_status"] == 3 and data["value"] == "NUMBA_ENABLE_CUDASIM=1", out


def test_doctor_exits_1_when_not_ready(capsys):
    fixtures = ROOT / "tests" / "testbed" / "fixtures"
    for name, status in (("no_gpu", 1), ("same_switch", 0)):
        assert main(["doctor", "--sysfs-root", str(fixtures / name / "sys"), "--proc-root",
                     str(fixtures / name / "proc"), "--json"]) == status
        assert json.loads(capsys.readouterr().out)["ready"] is (status == 0)


def test_figures_check_makes_no_folder(tmp_path, capsys):
    """--check writes nothing: a results folder that is not there is all stale, not made."""
    assert main(["figures", "--check", "--specs", str(EXPERIMENTS), "--results", str(tmp_path / "none"),
                 "--out", str(tmp_path / "figs"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["stale"]
    assert not (tmp_path / "none").exists() and not (tmp_path / "figs").exists()


def test_a_bad_point_names_its_file(tmp_path, capsys):
    """An error found at one point of a sweep names the experiment file, the sweep and the
    point."""
    argv = _sweep(tmp_path, "[sweep.vary]\nsize_bytes = [64, -5]\n", "latency")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'spec.toml'}: sweep 's', point {{'size_bytes': -5}}: size_bytes=-5" in err, err


def test_an_emulated_sweeps_qp_bound_is_the_contexts():
    """spec.EMULATED_MAX_QPS is the default max_qps of the Context the runner opens."""
    import inspect

    from gpuwrite.experiments import spec
    from gpuwrite.host.verbs import Context
    assert inspect.signature(Context).parameters["max_qps"].default == spec.EMULATED_MAX_QPS
