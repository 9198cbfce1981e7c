"""What the commands print where a researcher reads it: one size syntax, tables that keep
every character in a pipe, progress lines in a log, result files that say how they were made."""
import functools
import io
import json

import pandas as pd
import pytest

from gpuwrite import MAX_MESSAGE_BYTES
from gpuwrite.cli import UsageError, main
from gpuwrite.cli.common import LineProgress, parse_size, parse_sizes, provenance, write_rows


@pytest.mark.parametrize("text, size", [("4096", 4096), ("4K", 4096), ("4k", 4096), ("64KiB", 65536),
                                        ("1MiB", 1 << 20), ("2 M", 2 << 20), ("1G", 1 << 30), ("2GiB", 1 << 31)])
def test_one_size_syntax(text, size):
    assert parse_size(text, "--size") == size


@pytest.mark.parametrize("text", ["4Q", "-1", "", "1.5K", "0", "3GiB", "K"])
def test_bad_sizes_name_the_flag_and_the_value(text):
    with pytest.raises(UsageError) as info:
        parse_size(text, "--size")
    assert str(info.value).startswith("--size=") and text in str(info.value)
    assert info.value.allowed


def test_sizes_lists_and_bounds():
    assert parse_sizes("64, 4K,1MiB", "--sizes") == [64, 4096, 1 << 20]
    with pytest.raises(UsageError, match=r"--sizes='64,8K' is not allowed \(at '8K'\); allowed: sizes, each 1 to 4,096"):
        parse_sizes("64,8K", "--sizes", maximum=4096)
    with pytest.raises(UsageError, match=f"allowed: 1 to {MAX_MESSAGE_BYTES:,}"):
        parse_size(str(MAX_MESSAGE_BYTES + 1), "--size")


def test_tables_are_not_cut_in_a_pipe(capsys, monkeypatch):
    """capsys is not a terminal: the table is laid out at its natural width, every name whole
    (unless COLUMNS asks for a width: some machines' environments set it)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["model", "compare", "--topology", "across_root_ports", "--sizes", "64,1MiB"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert "gpu_push_inline" in out and "across_root_ports" in out and "1048576" in out


def test_progress_lines_for_a_log():
    stream = io.StringIO()
    progress = LineProgress(every_s=0.0, stream=stream)
    task = progress.add_task("fig1: model", total=4)
    progress.advance(task, 1)
    progress.advance(task, 3)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("fig1: model: 0/4 (0 %)")
    assert lines[1].startswith("fig1: model: 1/4 (25 %)") and "s left" in lines[1]
    assert lines[-1].startswith("fig1: model: 4/4 (100 %)")


def test_progress_lines_come_while_one_step_runs_long():
    """One long step (a path of `demo`) with no call in between: a line still comes every
    every_s (none came until the step ended, minutes later)."""
    import time

    stream = io.StringIO()
    with LineProgress(every_s=0.05, stream=stream) as progress:
        task = progress.add_task("gpu_push: 400 messages", total=1)
        time.sleep(0.5)
        waiting = stream.getvalue().splitlines()
        progress.advance(task)
    assert len(waiting) >= 3 and all(line.startswith("gpu_push: 400 messages: 0/1") for line in waiting)
    assert stream.getvalue().splitlines()[-1].startswith("gpu_push: 400 messages: 1/1 (100 %)")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_result_rows_carry_provenance(tmp_path, suffix):
    made = provenance("model compare", {"sizes": [64, 4096]}, "model")
    path = write_rows([{"size_bytes": 64, "latency_ns": 1.5, "steps": {"a": 1}}], tmp_path / f"rows{suffix}", made)
    rows = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    assert rows["command"][0] == "model compare" and rows["device"][0] == "model"
    assert json.loads(rows["parameters"][0]) == {"sizes": [64, 4096]}
    assert json.loads(rows["steps"][0]) == {"a": 1}
    assert rows["gpuwrite_version"][0] and rows["date"][0]


def test_a_sweep_named_twice_runs_once(tmp_path, capsys):
    """`sweep --sweep s --sweep s` ran s twice and stored each of its rows twice (in the
    results table, and in --out)."""
    spec = tmp_path / "spec.toml"
    spec.write_text('[[sweep]]\nname = "s"\nbackend = "model"\nmeasure = "latency"\n'
                    '[sweep.vary]\nsize_bytes = [64, 4096]\n')
    argv = ["sweep", str(spec), "--sweep", "s", "--sweep", "s", "--results", str(tmp_path / "r"), "--workers", "1",
            "--json"]
    for out, read in ((tmp_path / "r" / "spec.parquet", pd.read_parquet), (tmp_path / "rows.csv", pd.read_csv)):
        assert main(argv + (["--out", str(out)] if out.suffix == ".csv" else [])) == 0
        data = json.loads(capsys.readouterr().out)
        assert [report["sweep"] for report in data["sweeps"]] == ["s"]
        table = read(out)
        assert len(table) == data["rows"] == 2 and not table["config_hash"].duplicated().any()


def test_a_path_named_twice_runs_once(capsys, monkeypatch):
    """`demo --paths gpu_push,gpu_push` ran gpu_push twice, one result row each."""
    from gpuwrite.paths import runner

    ran = []
    real = runner.run

    @functools.wraps(real)      # demo reads run's defaults from its signature
    def counted(path, *args, **kwargs):
        ran.append(path)
        return real(path, *args, **kwargs)
    monkeypatch.setattr(runner, "run", counted)
    assert main(["demo", "--messages", "2", "--qps", "1", "--paths", "gpu_push,gpu_push", "--json"]) == 0
    assert ran == ["gpu_push"]
    assert [row["path"] for row in json.loads(capsys.readouterr().out)["results"]] == ["gpu_push"]
