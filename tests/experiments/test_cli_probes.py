"""Inputs a reviewer probing the command line tried and nobody had: each was a traceback,
an exit status other than 2, a message that did not name the value, or a file overwritten
silently. Every case runs ``main()`` in this process and checks the one error line (text
and ``--json``), as tests/experiments/test_cli_errors.py does for the cases before these."""
import json
import shutil
from pathlib import Path

import pytest

from gpuwrite.cli import main
from test_cli_errors import assert_one_error_line

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "testbed" / "fixtures"
SIM_CONFIG = '# my notes\nseed = 1\n[params]\npath = "gpu_push"\n[workload]\nn_messages = 10\n'
PARAMS = "# my notes\n[link]\ngeneration = 4\n"
SWEEP = '[[sweep]]\nname = "s"\nbackend = "model"\nmeasure = "latency"\n'


def _file(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def _bad_link_speed(tmp: Path) -> Path:
    """The same_switch fixture with its GPU's link speed unreadable as a number ("1.2.3")."""
    tree = tmp / "fx"
    shutil.copytree(FIXTURES / "same_switch", tree)
    speeds = sorted((tree / "sys" / "devices").rglob("current_link_speed"), key=lambda p: len(p.parts))
    speeds[-1].write_text("1.2.3 GT/s PCIe\n")
    return tree


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": error: " in line]


# (id, argv given a tmp folder, text the one error line must hold)
CASES = [
    # values that start with "-" but are no plain integer: argparse said "expected one
    # argument", without the value
    ("share-minus-inf", lambda t: ["model", "buffer", "--share", "-inf"], "share=-inf"),
    ("poll-minus-infinity", lambda t: ["model", "buffer", "--poll-interval", "-Infinity"],
     "--poll-interval=-inf"),
    ("demo-sizes-minus-4K", lambda t: ["demo", "--sizes", "-4K"], "--sizes='-4K'"),
    ("demo-qps-minus-nan", lambda t: ["demo", "--qps", "-nan"], "'-nan'"),
    ("sim-seed-minus-inf", lambda t: ["sim", _file(t, "c.toml", SIM_CONFIG), "--seed", "-inf"], "'-inf'"),
    ("pcie-start-minus-1e30", lambda t: ["model", "pcie", "--start", "-1e30"], "'-1e30'"),
    ("bench-qps-minus-1e3", lambda t: ["bench", "--qps", "-1e3"], "--qps='-1e3'"),
    ("testbed-timeout-minus-inf", lambda t: ["testbed", "--bootstrap-timeout", "-inf"], "--bootstrap-timeout -inf"),
    # an option no parser knows: named, with the options of the command it was given to
    ("demo-unknown-option", lambda t: ["demo", "--bogus"], "'--bogus' is not allowed"),
    ("pcie-unknown-option", lambda t: ["model", "pcie", "--bogus", "3"], "'--bogus 3' is not allowed"),
    ("sweep-two-files", lambda t: ["sweep", "a.toml", "b.toml"], "'b.toml' is not allowed"),
    # an output that is an input: the file read was overwritten with what was made of it
    ("sim-out-holds-config", lambda t: ["sim", _file(t, "run/config.toml", SIM_CONFIG), "--out", str(t / "run")],
     "its config.toml is the CONFIG file"),
    ("params-dump-is-config", lambda t: ["model", "params", "--config", _file(t, "p.toml", PARAMS),
                                         "--dump", str(t / "p.toml")], "it is the --config file"),
    ("params-dump-is-calibration-through-a-link",
     lambda t: ["model", "params", "--calibration", _file(t, "cal.toml", "[params.gpu]\nstore_rate_gbps = 100.0\n"),
                "--dump", str(_link(t / "cal.toml", t / "link.toml"))], "it is the --calibration file"),
    ("sweep-out-is-its-stored-table", lambda t: ["sweep", _file(t, "s.toml", SWEEP), "--results", str(t / "r"),
                                                 "--out", str(t / "r" / "s.parquet")], "it is the stored table"),
    ("sweep-out-is-its-stored-gpu-csv", lambda t: ["sweep", _file(t, "s.toml", SWEEP), "--results", str(t / "r"),
                                                   "--out", str(t / "r" / "gpu" / "s.csv")], "it is the stored table"),
    # an unwritable --out is bad input (2), found before the missing GPU (3)
    ("calibrate-out-unwritable-no-gpu-flag", lambda t: ["calibrate", "--out", "/proc/nope.toml"], "/proc/nope.toml"),
    # experiment files: tables that are not tables, texts that are not texts
    ("sweep-fixed-not-a-table", lambda t: ["sweep", _file(t, "s.toml", SWEEP + "fixed = 3\n"), "--results",
                                           str(t / "r")], "fixed=3 is not allowed"),
    ("sweep-vary-not-a-table", lambda t: ["sweep", _file(t, "s.toml", SWEEP + 'vary = "x"\n'), "--results",
                                          str(t / "r")], "vary='x' is not allowed"),
    ("sweep-title-not-text", lambda t: ["sweep", _file(t, "s.toml", '[figure]\ntitle = 5\n' + SWEEP), "--results",
                                        str(t / "r")], "figure.title=5"),
    ("sweep-caption-not-text", lambda t: ["sweep", _file(t, "s.toml", '[figure]\ncaption = ["x"]\n' + SWEEP),
                                          "--results", str(t / "r")], "figure.caption=['x']"),
    # a rule on a key the sweep neither fixes nor varies matched no point: nothing was left out
    ("sweep-exclude-on-a-default", lambda t: ["sweep", _file(t, "s.toml", SWEEP + "exclude = [{size_bytes = 4096}]\n"),
                                              "--results", str(t / "r")],
     "key 'size_bytes' is neither fixed nor varied"),
    # testbed's lines say what is allowed, as every other command's do
    ("testbed-paths-empty", lambda t: ["testbed", "--paths", ""], "allowed: gpu_push, gpu_push_inline"),
    ("testbed-path-unknown", lambda t: ["testbed", "--paths", "warp"], "--paths: path 'warp' is not allowed; allowed:"),
]


def _link(target: Path, link: Path) -> Path:
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("name, argv, named", CASES, ids=[c[0] for c in CASES])
def test_probed_input_is_one_line_naming_the_value(name, argv, named, as_json, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_one_error_line(argv(tmp_path) + (["--json"] if as_json else []), named, capsys)


def test_a_garbled_sysfs_link_speed_reads_as_unknown_not_a_traceback(tmp_path, capsys):
    """A link speed that is no number ("1.2.3 GT/s", which float() refused with a
    ValueError, a traceback until session 45) reads as an unknown one, as "Unknown" does:
    doctor says the NIC's link (the device the fixture garbles) is unknown, and the model
    takes the default generation for it (gpuwrite.model.sysfs.link_config_of)."""
    tree = _bad_link_speed(tmp_path)
    assert main(["doctor", "--sysfs-root", str(tree / "sys"), "--proc-root", str(tree / "proc"),
                 "--json"]) in (0, 1)      # 1: no GPU or NIC can run here (the fixture's are read)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    data = json.loads(out)
    assert [nic["link"] for nic in data["nics"]] == ["unknown"]
    assert [gpu["link"] for gpu in data["gpus"]] == ["Gen5 x16"]
    assert main(["model", "topology", "--sysfs", str(tree / "sys" / "devices"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and json.loads(out)


def test_an_unknown_option_is_named_with_the_commands_options(capsys):
    assert main(["model", "pcie", "--bogus", "--json"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("gpuwrite model pcie: error: ")
    data = json.loads(out)
    assert data["value"] == "--bogus"
    assert "--operation" in data["allowed"] and "--size" in data["allowed"] and "--sizes" not in data["allowed"]


def test_an_input_refused_as_an_output_is_left_as_it_was(tmp_path, capsys):
    """sim --out over its CONFIG's folder, model params --dump onto its --config: refused,
    and the file (its comments too) is what it was."""
    config = Path(_file(tmp_path, "run/config.toml", SIM_CONFIG))
    params = Path(_file(tmp_path, "p.toml", PARAMS))
    assert main(["sim", str(config), "--out", str(tmp_path / "run" / ".." / "run"), "--messages", "5"]) == 2
    assert main(["model", "params", "--config", str(params), "--dump", str(params), "--gen", "3"]) == 2
    capsys.readouterr()
    assert config.read_text() == SIM_CONFIG and params.read_text() == PARAMS
    assert not (tmp_path / "run" / "summary.json").exists()


def test_outputs_beside_their_inputs_still_work(tmp_path, capsys):
    """What the new checks must not refuse: --dump to another file, sim --out to another
    folder, and negative values that argparse took before (-5) or that are fine (--share=1)."""
    params = _file(tmp_path, "p.toml", PARAMS)
    assert main(["model", "params", "--config", params, "--dump", str(tmp_path / "all.toml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dump"] == str(tmp_path / "all.toml")
    config = _file(tmp_path, "run/config.toml", SIM_CONFIG)
    assert main(["sim", config, "--out", str(tmp_path / "out"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["out"] == str(tmp_path / "out")
    assert main(["demo", "-q", "-5"]) == 2 and "--qps=-5 is not allowed" in capsys.readouterr().err


def test_a_huge_range_is_counted_in_a_short_line(tmp_path, capsys):
    """A step of 1e-300 counted 6.4e301 values, printed as an integer of 300 digits."""
    spec = _file(tmp_path, "s.toml", SWEEP + "[sweep.vary]\nsize_bytes = {from = 64, to = 128, step = 1e-300}\n")
    assert main(["sweep", spec, "--results", str(tmp_path / "r")]) == 2
    (line,) = _errors(capsys.readouterr().err)
    assert "about 6.4e+301 values" in line and len(line) < 400, line


def test_a_figure_kind_its_sweeps_cannot_draw_is_named(tmp_path, capsys):
    """An experiment file of one's own whose sweeps lack the columns its figure kind draws
    (latency_vs_size needs topology): pandas' KeyError with a traceback, now the file, the
    kind and the column, exit 2, JSON too."""
    specs = tmp_path / "specs"
    _file(specs, "mine.toml", '[figure]\nkind = "latency_vs_size"\n' + SWEEP
          + '[sweep.vary]\npath = ["gpu_push"]\nsize_bytes = [64, 128]\n')
    assert main(["figures", "--specs", str(specs), "--results", str(tmp_path / "r"), "--out",
                 str(tmp_path / "f"), "--workers", "1", "--json"]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    (line,) = _errors(err)
    assert "mine.toml: figure.kind='latency_vs_size' is not allowed" in line and "'topology'" in line, line
    assert json.loads(out)["exit_status"] == 2
