"""Stored result tables: in step with the code, unchanged by a rerun, keyed by the engine's code."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gpuwrite.cli import main
from gpuwrite.experiments import spec as spec_module
from gpuwrite.experiments import store
from gpuwrite.experiments.spec import find_specs, load_spec
from gpuwrite.experiments.sweep import Pool, gpu_rows_of_other_code, run_spec, stale_tables

from tiny_specs import EXPERIMENTS, write_tiny_spec

ROOT = Path(__file__).resolve().parents[2]


def test_stored_tables_match_the_code():
    """Fails when a change to the model, the emulated backend or an experiment file left the
    committed tables behind: `gpuwrite figures` would recompute them (no recomputation here)."""
    stale = [line for path in find_specs(EXPERIMENTS) for line in stale_tables(load_spec(path), EXPERIMENTS / "results")]
    assert not stale, "stored tables are stale; regenerate them with `gpuwrite figures`:\n" + "\n".join(stale)


def test_gpu_rows_of_other_code_are_named(tmp_path, monkeypatch, capsys):
    from gpuwrite.experiments.spec import config_hash, resolve

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "emu.toml").write_text('[figure]\nkind = "emulated_latency_vs_size"\n'
                                    '[[sweep]]\nname = "e"\nbackend = "emulated"\nrequire = "gpu"\n'
                                    '[sweep.vary]\nrepeat = [0, 1]\nsize_bytes = [64, 4096]\n')
    spec = load_spec(specs / "emu.toml")
    sweep = spec.sweeps[0]
    points = sweep.points("Test GPU")
    table = pd.DataFrame({"figure": "emu", "sweep": "e", "backend": "emulated", "measure": "",
                          "output": "summary", "size_bytes": [p["size_bytes"] for p in points],
                          "repeat": [p["repeat"] for p in points], "path": "gpu_push",
                          "block_threads": 256, "latency_p50_us": 5.0, "sent_messages": 100,
                          "delivered_messages": 100, "device": "Test GPU", "git_commit": "a" * 40,
                          "config_hash": [config_hash(resolve(sweep, p, "Test GPU")) for p in points]})
    results = tmp_path / "results"
    gpu_table = store.table_path(results, "emu", gpu=True)
    store.write_table(table, gpu_table)
    assert gpu_rows_of_other_code(spec, results) == []
    assert main(["figures", "--specs", str(specs), "--results", str(results), "--check", "--json"]) == 0
    capsys.readouterr()
    store.write_table(table.iloc[1:], gpu_table)          # a point never measured
    (line,) = gpu_rows_of_other_code(spec, results)
    assert "0 of 3 measured points are not what the code now runs, 1 points are not measured" in line
    stray = table.iloc[:1].assign(config_hash="0" * 64)   # a row of earlier code left beside
    store.write_table(pd.concat([table, stray], ignore_index=True), gpu_table)
    (line,) = gpu_rows_of_other_code(spec, results)
    assert "1 of 5 measured points are not what the code now runs, 0 points are not measured" in line
    store.write_table(table, gpu_table)
    _fingerprint_changed(monkeypatch)                     # the emulated code changed since
    (line,) = gpu_rows_of_other_code(spec, results)
    assert "4 of 4 measured points are not what the code now runs" in line and "gpu_experiments.sh" in line
    assert main(["figures", "--specs", str(specs), "--results", str(results), "--check", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["gpu_other_code"] == [line]
    # the figure itself says so (a CPU-only machine may land a fix it cannot measure)
    from gpuwrite.experiments.render import draw

    fig, _ = draw(spec, results)
    said = [t.get_text() for t in fig.texts if t.get_gid() == "gpu-other-code"]
    assert len(said) == 1 and "measured with other code than this checkout's" in said[0]
    monkeypatch.undo()
    fig, _ = draw(spec, results)
    assert not [t for t in fig.texts if t.get_gid() == "gpu-other-code"]


def test_figures_check_names_a_stale_table(tmp_path, capsys):
    spec_file = write_tiny_spec("fig1_latency", tmp_path / "specs")
    results = tmp_path / "results"
    assert main(["figures", "--specs", str(tmp_path / "specs"), "--results", str(results), "--check", "--json"]) == 1
    assert "fig1_latency" in json.loads(capsys.readouterr().out)["stale"][0]
    run_spec(load_spec(spec_file), results, pool=Pool(1))
    assert main(["figures", "--specs", str(tmp_path / "specs"), "--results", str(results), "--check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stale"] == []


def _fingerprint_changed(monkeypatch):
    """As if the model's code had changed in a way that leaves its numbers alone."""
    real = spec_module.code_fingerprint
    monkeypatch.setattr(spec_module, "code_fingerprint", lambda backend: real(backend)[::-1])


def test_rerun_after_a_code_change_keeps_rows_whose_values_are_equal(tmp_path, monkeypatch):
    spec = load_spec(write_tiny_spec("fig1_latency", tmp_path / "specs"))
    table_file = store.table_path(tmp_path, spec.name)
    run_spec(spec, tmp_path, pool=Pool(1))
    first = pd.read_parquet(table_file)
    first["date"] = "2000-01-01"          # when the stored numbers were made
    store.write_table(first, table_file)
    made, made_ns = table_file.read_bytes(), table_file.stat().st_mtime_ns
    assert run_spec(spec, tmp_path, pool=Pool(1))["reports"][0].computed == 0
    # nothing recomputed: the file is not even rewritten
    assert table_file.read_bytes() == made and table_file.stat().st_mtime_ns == made_ns

    _fingerprint_changed(monkeypatch)
    assert stale_tables(spec, tmp_path)
    ran = run_spec(spec, tmp_path, pool=Pool(1))
    assert ran["reports"][0].computed == len(first)
    again = pd.read_parquet(table_file)
    assert set(again["date"]) == {"2000-01-01"}      # same values: the stored rows stand
    assert not set(again["config_hash"]) & set(first["config_hash"])
    pd.testing.assert_frame_equal(again.drop(columns="config_hash"), first.drop(columns="config_hash"))
    assert not stale_tables(spec, tmp_path)
    settled = table_file.read_bytes()
    run_spec(spec, tmp_path, pool=Pool(1))
    assert table_file.read_bytes() == settled


@pytest.mark.parametrize("now, expected", [
    ("f" * 40, ["1" * 40, "f" * 40, "f" * 40]),          # a clean checkout: the untraceable take it
    ("f" * 40 + "+dirty", ["1" * 40, "2" * 40 + "+dirty", None]),   # a dirty one changes nothing
])
def test_rows_first_made_by_uncommitted_code_take_the_clean_commit_that_reproduces_them(
        tmp_path, monkeypatch, now, expected):
    spec = load_spec(write_tiny_spec("fig1_latency", tmp_path / "specs"))
    table_file = store.table_path(tmp_path, spec.name)
    run_spec(spec, tmp_path, pool=Pool(1))
    first = pd.read_parquet(table_file)
    stamps = ["1" * 40, "2" * 40 + "+dirty", None]
    first["git_commit"] = [stamps[k % 3] for k in range(len(first))]
    first["date"] = "2000-01-01"
    store.write_table(first, table_file)
    _fingerprint_changed(monkeypatch)
    monkeypatch.setattr(store, "git_commit", lambda: now)
    run_spec(spec, tmp_path, pool=Pool(1))
    again = pd.read_parquet(table_file)
    got = [None if v is None or v != v else v for v in again["git_commit"]]
    assert got == [expected[k % 3] for k in range(len(first))]
    assert set(again["date"]) == {"2000-01-01"}      # still when the numbers were first made


def test_rerun_with_changed_values_writes_new_rows(tmp_path, monkeypatch):
    spec = load_spec(write_tiny_spec("fig1_latency", tmp_path / "specs"))
    table_file = store.table_path(tmp_path, spec.name)
    run_spec(spec, tmp_path, pool=Pool(1))
    first = pd.read_parquet(table_file)
    first["date"] = "2000-01-01"
    first["latency_ns"] += 1.0               # as if the model had computed other numbers then
    store.write_table(first, table_file)
    _fingerprint_changed(monkeypatch)
    run_spec(spec, tmp_path, pool=Pool(1))
    again = pd.read_parquet(table_file)
    assert "2000-01-01" not in set(again["date"])
    assert (again["latency_ns"] == first["latency_ns"] - 1.0).all()


def test_emulated_fingerprint_includes_the_c_engine(monkeypatch):
    spec_module.code_fingerprint.cache_clear()
    before = spec_module.code_fingerprint("emulated")
    monkeypatch.setattr(spec_module, "engine_fingerprint", lambda: "0" * 64)
    spec_module.code_fingerprint.cache_clear()
    try:
        assert spec_module.code_fingerprint("emulated") != before
        assert spec_module.code_fingerprint("model") == spec_module.code_fingerprint("model")
    finally:
        monkeypatch.undo()
        spec_module.code_fingerprint.cache_clear()


def test_built_engine_matches_the_c_sources():
    """The extension's embedded digest is that of csrc/ now (else: python3 csrc/ffi_build.py)."""
    loader = importlib.util.spec_from_file_location("gw_ffi_build", ROOT / "csrc" / "ffi_build.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    assert spec_module.engine_fingerprint() == module.csrc_sha256()


def test_installed_copy_without_csrc_gets_the_same_keys(tmp_path):
    """An installed package (no csrc/, no pyproject.toml beside it) fingerprints the emulated
    backend exactly as this checkout does."""
    site = tmp_path / "site"
    # The package this test imported (installed, or built in place): it has the extension.
    shutil.copytree(Path(spec_module.__file__).resolve().parents[1], site / "gpuwrite",
                    ignore=shutil.ignore_patterns("__pycache__", "*.c", "*.o"))
    code = "from gpuwrite.experiments.spec import code_fingerprint as f; print(f('emulated'), f('model'))"
    # The copy comes first; the rest of the path stays (a machine may bring its own numpy
    # or numba that way).
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "NUMBA_ENABLE_CUDASIM": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [spec_module.code_fingerprint("emulated"), spec_module.code_fingerprint("model")]


@pytest.mark.slow
@pytest.mark.parametrize("device", [None, "NVIDIA H100 80GB HBM3"])
def test_figures_on_the_stored_results_change_no_table(tmp_path, capsys, monkeypatch, device):
    """As on a fresh clone: `gpuwrite figures` on a copy of the committed tables computes
    nothing and leaves every table byte for byte as committed (about 30 s: it draws). Also
    as on the GPU the stored rows were measured on (``device``): there the GPU table is
    merged into, and must come out the same (session 13: it gained float columns)."""
    if device is not None:
        from gpuwrite.experiments import backends
        monkeypatch.setattr(backends, "device_name", lambda: device)
    results = tmp_path / "results"
    shutil.copytree(EXPERIMENTS / "results", results, ignore=shutil.ignore_patterns("cache"))
    before = {p.relative_to(results): p.read_bytes() for p in results.rglob("*.parquet")}
    assert main(["figures", "--specs", str(EXPERIMENTS), "--results", str(results), "--out",
                 str(tmp_path / "figures"), "--workers", "1", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)["figures"]
    assert [m["figure"] for m in made if m["computed"]] == []
    after = {p.relative_to(results): p.read_bytes() for p in results.rglob("*.parquet")}
    assert after == before


def test_a_table_written_with_other_bytes_but_the_same_rows_is_left_alone(tmp_path):
    """Another pyarrow writes other bytes for the same rows (a GPU image's did, session
    13): the stored file is kept as it is; a table whose rows changed is written."""
    path = tmp_path / "t.parquet"
    frame = store.tidy(pd.DataFrame({"sweep": ["a", "b"], "size_bytes": [64, 4096],
                                     "latency_us": [1.5, float("nan")]}))
    frame.to_parquet(path, index=False, compression="gzip")   # other bytes, same rows
    kept = path.read_bytes()
    store.write_table(frame, path)
    assert path.read_bytes() == kept
    changed = frame.assign(latency_us=[1.5, 2.0])
    store.write_table(changed, path)
    assert path.read_bytes() != kept
    assert pd.read_parquet(path)["latency_us"].tolist() == [1.5, 2.0]


def test_check_names_rows_edited_by_hand(tmp_path, capsys):
    """A size changed by hand keeps its row's config_hash, so the hashes alone said nothing
    and the figure drew the number at the wrong size; a row copied by hand counted twice.
    --check names both, in the regenerable table and in a GPU table."""
    from gpuwrite.experiments.spec import config_hash, resolve

    spec_file = write_tiny_spec("fig1_latency", tmp_path / "specs")
    spec = load_spec(spec_file)
    results = tmp_path / "results"
    run_spec(spec, results, pool=Pool(1))
    path = store.table_path(results, "fig1_latency")
    table = pd.read_parquet(path)
    assert stale_tables(spec, results) == []
    edited = table.copy()
    edited.loc[0, "size_bytes"] = 128
    store.write_table(edited, path)
    (line,) = stale_tables(spec, results)
    assert "1 of 18 rows are not the point their config_hash names" in line
    store.write_table(pd.concat([table, table.iloc[:2]], ignore_index=True), path)
    (line,) = stale_tables(spec, results)
    assert "2 of 20 rows are not the point their config_hash names" in line
    assert main(["figures", "--specs", str(tmp_path / "specs"), "--results", str(results), "--check", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["stale"] == [line]

    (tmp_path / "specs" / "emu.toml").write_text('[[sweep]]\nname = "e"\nbackend = "emulated"\nrequire = "gpu"\n'
                                                 '[sweep.vary]\nsize_bytes = [64, 4096]\n')
    emu = load_spec(tmp_path / "specs" / "emu.toml")
    points = emu.sweeps[0].points("Test GPU")
    measured = pd.DataFrame({"figure": "emu", "sweep": "e", "backend": "emulated", "measure": "", "output": "summary",
                             "size_bytes": [p["size_bytes"] for p in points], "latency_p50_us": [5.0, 9.0],
                             "device": "Test GPU",
                             "config_hash": [config_hash(resolve(emu.sweeps[0], p, "Test GPU")) for p in points]})
    gpu_table = store.table_path(results, "emu", gpu=True)
    store.write_table(measured, gpu_table)
    assert gpu_rows_of_other_code(emu, results) == []
    store.write_table(measured.assign(size_bytes=[4096, 64]), gpu_table)    # two sizes swapped by hand
    (line,) = gpu_rows_of_other_code(emu, results)
    assert "2 of 2 rows are not the point their config_hash names" in line
