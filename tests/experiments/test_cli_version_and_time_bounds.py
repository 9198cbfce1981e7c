"""``--version --json`` printed plain text; ``model buffer --poll-interval 1e30`` (and the
stall options beside it) answered with a 4.7e31-byte buffer; a refused ``inf`` went out
as ``Infinity``, which is not JSON. Each case runs ``main()`` in this process."""
import json

import pytest

from gpuwrite.cli import main
from gpuwrite.experiments.store import gpuwrite_version
from gpuwrite.model import buffer, checks
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import Params
from test_cli_errors import assert_one_error_line


def _strict(text: str):
    """JSON as a strict reader takes it: NaN and Infinity are refused."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("argv", [["--version", "--json"], ["--json", "--version"]])
def test_version_under_json_is_a_json_object(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out, err = capsys.readouterr()
    assert _strict(out) == {"gpuwrite": gpuwrite_version()} and err == ""


def test_plain_version_is_unchanged(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"gpuwrite {gpuwrite_version()}\n"


TIME_OPTIONS = ("--poll-interval", "--stall-period", "--stall-duration")


@pytest.mark.parametrize("flag", TIME_OPTIONS)
@pytest.mark.parametrize("text, shown", [("1e30", "1e+30"), ("inf", "inf"), ("nan", "nan"), ("-5", "-5.0"),
                                         ("1e16", "1e+16")])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_model_buffer_time_options_are_bounded(flag, text, shown, as_json, capsys):
    argv = ["model", "buffer", "--topology", "same_switch", flag, text] + (["--json"] if as_json else [])
    assert_one_error_line(argv, f"{flag}={shown} is not allowed", capsys)
    main(argv)
    out, err = capsys.readouterr()
    assert f"from 0 to {checks.MAX_TIME_NS:.4g}" in err and "simulator's clock" in err
    if as_json:
        assert _strict(out)["value"] in (float(shown), shown)     # inf and nan as text


def test_the_bound_itself_is_allowed(capsys):
    assert main(["model", "buffer", "--topology", "same_switch", "--json", "--poll-interval",
                 repr(checks.MAX_TIME_NS)]) == 0
    assert len(_strict(capsys.readouterr().out)["rows"]) == 1
    assert main(["model", "buffer", "--topology", "same_switch", "--json", "--share", "0.1",
                 "--stall-period", repr(checks.MAX_TIME_NS), "--stall-duration", "1e15"]) == 0


def test_a_rate_near_the_bound_is_not_shown_as_zero(capsys, monkeypatch):
    """A staging loop of days allows some thousandths of a Gb/s: the table says how many,
    not "<= 0 Gb/s", and the JSON has the same value. (A COLUMNS the environment sets, as
    the GPU machine's does, would wrap the cell: piped output gets its wide default.)"""
    monkeypatch.delenv("COLUMNS", raising=False)
    argv = ["model", "buffer", "--topology", "same_switch", "--poll-interval",
            repr(checks.MAX_TIME_NS)]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert main(argv + ["--json"]) == 0
    (row,) = _strict(capsys.readouterr().out)["rows"]
    assert not row["feasible"] and 0 < row["max_gbps"] < 1, row
    assert "<= 0 Gb/s" not in table
    assert f"<= {row['max_gbps']:.3g} Gb/s" in table


def test_the_bound_is_the_simulators_clock():
    from gpuwrite.model import sim
    assert checks.MAX_TIME_NS == sim.LATEST_NS


@pytest.mark.parametrize("section, values, named", [
    ("gpu", {"poll_interval_ns": 1e30}, "gpu.poll_interval_ns=1e+30"),
    ("receiver", {"stall_period_ns": 2e30, "stall_duration_ns": 1e30}, "receiver.stall_period_ns=2e+30"),
    ("receiver", {"stall_period_ns": 0.0, "stall_duration_ns": 1e30}, "receiver.stall_duration_ns=1e+30"),
], ids=["poll", "stall-period", "stall-duration"])
def test_the_closed_form_keeps_the_same_bound(section, values, named, tmp_path, capsys):
    """A library caller, or a --config file, past the bound: the same refusal, named by key."""
    with pytest.raises(ParamError, match=named.replace("+", r"\+") + " is not allowed; allowed: a number of ns"):
        buffer.need(Params().updated({section: values}), 0.5)
    config = tmp_path / "p.toml"
    config.write_text(f"[{section}]\n" + "".join(f"{k} = {v!r}\n" for k, v in values.items()))
    assert_one_error_line(["model", "buffer", "--config", str(config)], named, capsys)


def test_a_refused_infinity_is_strict_json(capsys):
    """The value of the JSON error was ``Infinity`` (json.dumps's), which strict readers refuse."""
    assert main(["model", "buffer", "--poll-interval", "inf", "--json"]) == 2
    data = _strict(capsys.readouterr().out)
    assert data["value"] == "inf" and data["exit_status"] == 2


SIM_CONFIG = 'seed = 1\n[params]\npath = "gpu_push"\n[workload]\nn_messages = 10\n'


@pytest.mark.parametrize("flag", ["--seed", "--messages"])
@pytest.mark.parametrize("text", ["1e30", "inf", "nan", str(10**30)])
def test_sim_numeric_options_refuse_huge_and_non_finite(flag, text, tmp_path, capsys):
    """sim's numeric options are integers: argparse refuses 1e30, inf and nan, and the
    model's bounds (the seed's 2**63 - 1, at most 10,000,000 messages) a huge integer."""
    config = tmp_path / "c.toml"
    config.write_text(SIM_CONFIG)
    for extra in ([], ["--json"]):
        assert_one_error_line(["sim", str(config), flag, text, *extra], text, capsys)
