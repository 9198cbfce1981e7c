"""gpuwrite sweep and gpuwrite figures from the command line, end to end on tiny files."""
import json

import pandas as pd
import pytest

from gpuwrite.cli import main
from gpuwrite.cudaenv import SIMULATOR

from tiny_specs import write_tiny_spec


# These check what a machine without a GPU does (simulator rows, GPU-only sweeps skipped,
# "no GPU measurements" notes); on a GPU the same commands measure instead.
CPU_ONLY = pytest.mark.skipif(not SIMULATOR, reason="checks the behaviour of a machine without a GPU")


def test_sweep_json_csv_and_resume(tmp_path, capsys):
    spec = write_tiny_spec("fig6_push_wins", tmp_path / "specs")
    args = ["sweep", str(spec), "--results", str(tmp_path / "results"), "--csv", "--workers", "1", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert [s["computed"] for s in first["sweeps"]] == [36, 36, 36] and first["rows"] == 108
    assert sorted(p.rsplit(".", 1)[1] for p in first["tables"]) == ["csv", "parquet"]
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert [s["computed"] for s in again["sweeps"]] == [0, 0, 0] and \
        [s["cached"] for s in again["sweeps"]] == [36, 36, 36]
    out = tmp_path / "latency.csv"
    assert main(["sweep", str(spec), "--sweep", "latency", "--results", str(tmp_path / "results"),
                 "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    assert set(pd.read_csv(out)["sweep"]) == {"latency"}


def test_usage_errors_name_the_value(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.toml")]) == 2
    assert "nope.toml" in capsys.readouterr().err
    spec = write_tiny_spec("fig1_latency", tmp_path / "specs")
    assert main(["sweep", str(spec), "--sweep", "nosuch", "--results", str(tmp_path)]) == 2
    assert "'nosuch'" in capsys.readouterr().err
    assert main(["sweep", str(spec), "--workers", "0"]) == 2
    assert "--workers=0" in capsys.readouterr().err
    assert main(["figures", "--specs", str(tmp_path / "specs"), "--only", "fig9"]) == 2
    err = capsys.readouterr().err
    assert "'fig9'" in err and "fig1_latency" in err


@CPU_ONLY
def test_figures_end_to_end_into_tmp_path(tmp_path, capsys):
    for name in ("fig1_latency", "fig3_buffer_stall", "fig5_latency_cdf"):
        write_tiny_spec(name, tmp_path / "specs")
    args = ["figures", "--specs", str(tmp_path / "specs"), "--results", str(tmp_path / "results"),
            "--out", str(tmp_path / "figures"), "--workers", "2", "--json"]
    assert main(args) == 0
    made = {m["figure"]: m for m in json.loads(capsys.readouterr().out)["figures"]}
    assert set(made) == {"fig1_latency", "fig3_buffer_stall", "fig5_latency_cdf"}
    for name, entry in made.items():
        for suffix in ("png", "pdf"):
            path = tmp_path / "figures" / f"{name}.{suffix}"
            assert path.stat().st_size > 5000, path
    assert made["fig5_latency_cdf"]["skipped"] and made["fig5_latency_cdf"]["rows"] == 0
    assert made["fig3_buffer_stall"]["computed"] == 2 + 2 * 2    # timeseries: 2 policies; buffer: 2 x 2
    assert main(args) == 0
    again = {m["figure"]: m for m in json.loads(capsys.readouterr().out)["figures"]}
    assert all(m["computed"] == 0 for m in again.values())
