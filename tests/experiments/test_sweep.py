"""Sweeps: tidy tables with configuration beside measurements, resume, worker processes, CSV."""
import json
import re
import sys

import pandas as pd
import pytest

from gpuwrite.cudaenv import SIMULATOR

from gpuwrite.experiments import backends, store
from gpuwrite.experiments.spec import load_spec
from gpuwrite.experiments.sweep import Pool, run_spec

SPEC = """
[[sweep]]
name = "lat"
backend = "model"
measure = "latency"
[sweep.fixed]
topology = "across_sockets"
[sweep.vary]
path = ["nic_pull", "gpu_push"]
size_bytes = [64, 1024, 16384]

[[sweep]]
name = "sim"
backend = "model"
measure = "simulate"
[sweep.fixed]
"workload.n_messages" = 300
"workload.n_qps" = 4
[sweep.vary]
"nic.policy" = ["hold", "drop"]

[[sweep]]
name = "emu"
backend = "emulated"
[sweep.fixed]
simulator_messages = 1
[sweep.vary]
size_bytes = [64, 128]

[[sweep]]
name = "gpu_only"
backend = "emulated"
require = "gpu"
[sweep.vary]
size_bytes = [64]
"""


# These check what a machine without a GPU does (simulator rows, GPU-only sweeps skipped,
# "no GPU measurements" notes); on a GPU the same commands measure instead.
CPU_ONLY = pytest.mark.skipif(not SIMULATOR, reason="checks the behaviour of a machine without a GPU")


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(SPEC)
    return load_spec(path)


@CPU_ONLY
def test_table_has_configuration_measurements_and_provenance(spec, tmp_path):
    ran = run_spec(spec, tmp_path / "results", pool=Pool(1))
    reports = {r.sweep: r for r in ran["reports"]}
    assert [reports[n].computed for n in ("lat", "sim", "emu")] == [6, 2, 2]
    assert reports["gpu_only"].skipped and reports["gpu_only"].computed == 0
    table = pd.read_parquet(tmp_path / "results" / "tiny.parquet")
    assert not (tmp_path / "results" / "gpu").exists()
    assert list(table.columns[:5]) == ["figure", "sweep", "backend", "measure", "output"]
    assert list(table.columns[-5:]) == ["device", "date", "gpuwrite_version", "git_commit", "config_hash"]
    lat = table[table["sweep"] == "lat"]
    assert list(lat["path"]) == ["nic_pull"] * 3 + ["gpu_push"] * 3
    assert (lat["topology"] == "across_sockets").all() and (lat["device"] == "model").all()
    assert (lat["latency_ns"] > 0).all() and lat["config_hash"].is_unique
    from gpuwrite.model import Params, latency_ns
    expected = latency_ns("gpu_push", "across_sockets", 1024, Params())
    assert lat[(lat["path"] == "gpu_push") & (lat["size_bytes"] == 1024)]["latency_ns"].item() == expected
    sim = table[table["sweep"] == "sim"].set_index("nic.policy")
    assert sim.loc["hold", "dropped"] == 0 and sim.loc["hold", "messages"] == 300
    emu = table[table["sweep"] == "emu"]
    assert (emu["device"] == backends.device_name()).all()
    assert (emu["delivered_messages"] == emu["sent_messages"]).all()
    assert table["gpuwrite_version"].iloc[0] == store.gpuwrite_version()


@CPU_ONLY
def test_second_run_computes_nothing_and_gives_the_same_table(spec, tmp_path):
    run_spec(spec, tmp_path, pool=Pool(1))
    first = pd.read_parquet(tmp_path / "tiny.parquet")
    again = run_spec(spec, tmp_path, pool=Pool(1))
    assert sum(r.computed for r in again["reports"]) == 0
    assert sum(r.cached for r in again["reports"]) == 10
    pd.testing.assert_frame_equal(first, pd.read_parquet(tmp_path / "tiny.parquet"))
    fresh = run_spec(spec, tmp_path, pool=Pool(1), fresh=True, only=["lat"])
    assert fresh["reports"][0].computed == 6


@CPU_ONLY
def test_a_sweep_named_twice_runs_once_for_library_callers(spec, tmp_path):
    # run_spec(only=["lat", "lat"]) ran "lat" twice and stored its rows twice
    ran = run_spec(spec, tmp_path, pool=Pool(1), only=["lat", "lat"])
    assert [r.sweep for r in ran["reports"]] == ["lat"]
    table = pd.read_parquet(tmp_path / "tiny.parquet")
    assert len(table) == ran["rows"] == 6 and not table["config_hash"].duplicated().any()


@CPU_ONLY
def test_a_fresh_sweep_names_an_unreadable_stored_table_before_computing_a_point(spec, tmp_path,
                                                                                   monkeypatch):
    # --fresh merges its rows into the stored table at the end: a table that was no Parquet
    # file was found only after every point had been computed
    from gpuwrite.experiments.spec import SpecError

    (tmp_path / "tiny.parquet").write_text("version https://git-lfs.github.com/spec/v1\n")
    calls = []
    monkeypatch.setattr(backends, "compute", lambda config: calls.append(config))
    with pytest.raises(SpecError, match=r"tiny.parquet.*is not allowed"):
        run_spec(spec, tmp_path, pool=Pool(1), fresh=True, only=["lat"])
    assert calls == []


def _interrupt_at(monkeypatch, n: int) -> list:
    """Makes the ``n``-th point computed raise KeyboardInterrupt, as Ctrl-C would; returns
    the list of the configurations computed so far (the interrupted one included)."""
    real, calls = backends.compute, []

    def failing(config):
        calls.append(config)
        if len(calls) == n:
            raise KeyboardInterrupt("stopped by the user")
        return real(config)

    monkeypatch.setattr(backends, "compute", failing)
    return calls


def test_interrupted_sweep_resumes_from_its_chunks(spec, tmp_path, monkeypatch):
    real = backends.compute
    _interrupt_at(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        run_spec(spec, tmp_path, only=["lat"], pool=Pool(1))
    assert not (tmp_path / "tiny.parquet").exists()
    assert len(list((tmp_path / "cache" / "tiny").glob("lat-*.parquet"))) == 3
    monkeypatch.setattr(backends, "compute", real)
    ran = run_spec(spec, tmp_path, only=["lat"], pool=Pool(1))
    assert (ran["reports"][0].cached, ran["reports"][0].computed) == (3, 3)
    assert not list((tmp_path / "cache" / "tiny").glob("*.parquet"))   # the table holds them now


def test_worker_processes_give_the_same_rows(spec, tmp_path):
    with Pool(2) as pool:
        run_spec(spec, tmp_path / "two", only=["sim"], pool=pool)
    run_spec(spec, tmp_path / "one", only=["sim"], pool=Pool(1))
    two, one = (pd.read_parquet(tmp_path / d / "tiny.parquet") for d in ("two", "one"))
    pd.testing.assert_frame_equal(two, one)


def test_csv_on_request_and_single_sweep_keeps_the_others(spec, tmp_path):
    run_spec(spec, tmp_path, only=["lat", "sim"], pool=Pool(1))
    ran = run_spec(spec, tmp_path, only=["lat"], csv=True, pool=Pool(1))
    assert {p.suffix for p in ran["tables"]} == {".parquet", ".csv"}
    csv = pd.read_csv(tmp_path / "tiny.csv")
    parquet = pd.read_parquet(tmp_path / "tiny.parquet")
    assert set(parquet["sweep"]) == {"lat", "sim"} and len(csv) == len(parquet)
    assert list(csv["latency_ns"].dropna()) == pytest.approx(list(parquet["latency_ns"].dropna()))


@CPU_ONLY
def test_gpu_table_is_left_alone_by_a_cpu_run(spec, tmp_path):
    gpu_table = store.table_path(tmp_path, "tiny", gpu=True)
    measured = pd.DataFrame({"figure": "tiny", "sweep": "gpu_only", "backend": "emulated", "measure": "",
                             "output": "summary", "size_bytes": [64], "throughput_gbps": [12.5],
                             "device": "Some GPU", "date": "2026-11-21", "gpuwrite_version": "0.1.0",
                             "config_hash": "x"})
    store.write_table(measured, gpu_table)
    before = gpu_table.read_bytes()
    run_spec(spec, tmp_path, pool=Pool(1))
    assert gpu_table.read_bytes() == before
    both = store.load_results(tmp_path, "tiny")
    assert "Some GPU" in set(both["device"]) and "model" in set(both["device"])


def test_emulated_message_counts_on_a_gpu_and_on_the_simulator():
    from gpuwrite.experiments.spec import EMULATED_DEFAULTS, load_spec as load
    from tiny_specs import EXPERIMENTS

    fig4 = load(EXPERIMENTS / "fig4_throughput.toml").sweep("emulated")
    counts = {values["size_bytes"]: backends.message_count({**EMULATED_DEFAULTS, **values}, simulator=False)
              for values in fig4.points() if values["path"] == "gpu_push"}
    assert counts[1 << 20] == 256 and counts[65536] == 4096 and counts[64] == 200_000
    assert max(size * count for size, count in counts.items()) <= 256 << 20
    assert backends.message_count({**EMULATED_DEFAULTS, **fig4.points()[0]}, simulator=True) == 2
    assert backends.message_count({**EMULATED_DEFAULTS, "messages": 50}, simulator=False) == 50


def test_a_failed_runs_text_names_what_the_pull_agent_did():
    errors = {7: {"status": "a completion carried an error syndrome", "syndrome": "local_prot_err",
                  "reason": "pull_failed"}}
    agent = {"exit": "stopped", "pulls": 0, "bytes": 0, "helped_chunks": 0, "engine_answered": 0,
             "engine_failed": 1}
    assert backends._failure_text(errors, agent) == (
        "1 QP: a completion carried an error syndrome (local_prot_err, pull_failed); pull agent "
        "stopped, 0 pulls answered, the engine saw 0 answered and failed 1")
    assert backends._failure_text({}, agent) == ""          # nothing failed: nothing to say
    assert backends._failure_text(errors) == \
        "1 QP: a completion carried an error syndrome (local_prot_err, pull_failed)"


def test_a_write_that_fails_midway_leaves_the_stored_table_whole(spec, tmp_path, monkeypatch):
    """A full disk (or a kill) while a table is written: the stored table keeps its old
    bytes, and no half-written file is left beside it."""
    import builtins
    import errno
    import io

    run_spec(spec, tmp_path, only=["lat"], pool=Pool(1))
    table = tmp_path / "tiny.parquet"
    stored = pd.read_parquet(table)
    stored["latency_ns"] *= 2      # so that the run below has other rows to write
    store.write_table(stored, table)
    before = table.read_bytes()
    real_open = io.open

    class HalfWriter:
        def __init__(self, file):
            self.file = file

        def write(self, data):
            self.file.write(bytes(data)[:len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device", str(self.file.name))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    def full_disk(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        return HalfWriter(opened) if "w" in mode and "tiny.parquet" in str(file) else opened

    monkeypatch.setattr(io, "open", full_disk)
    monkeypatch.setattr(builtins, "open", full_disk)
    with pytest.raises(OSError):
        run_spec(spec, tmp_path, only=["lat"], fresh=True, pool=Pool(1))
    monkeypatch.undo()
    assert table.read_bytes() == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


REFUSED_WHEN_RUN = """
[[sweep]]
name = "sim"
backend = "model"
measure = "simulate"
[sweep.vary]
"gpu.poll_interval_ns" = [1e16, 2e16]
"""


def test_a_point_the_simulator_refuses_in_a_worker_is_an_error_not_a_hang(tmp_path):
    """The simulator refuses these points when it runs them (longer than its clock), with a
    ParamError, in a worker process: the sweep names the error (exit status 2); it used to
    wait for ever, as the error could not be unpickled in the parent."""
    import subprocess
    import sys

    from childenv import child_env

    path = tmp_path / "refused.toml"
    path.write_text(REFUSED_WHEN_RUN)
    run = subprocess.run([sys.executable, "-m", "gpuwrite", "sweep", str(path), "--results", str(tmp_path / "r"),
                          "--workers", "2", "--json"], capture_output=True, text=True, timeout=90,
                         env=child_env())
    assert run.returncode == 2, run.stderr
    error = json.loads(run.stdout)["error"]
    assert "simulated time" in error and "Traceback" not in run.stderr
    # ... and names the point it refused (either may be the first to fail)
    assert re.search(r"sweep 'sim', point gpu\.poll_interval_ns=(1e\+16|2e\+16): ", error), error


SLOW_POINTS = """
[[sweep]]
name = "slow"
backend = "model"
measure = "simulate"
[sweep.fixed]
path = "gpu_push"
"workload.n_messages" = 3000000
"workload.size_bytes" = 4096
[sweep.vary]
seed = [1, 2, 3, 4, 5, 6, 7, 8]
"""


def _spawned_workers(parent: int) -> list[int]:
    """The multiprocessing workers (spawned interpreters) whose parent is ``parent``."""
    import os
    from pathlib import Path

    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:     # gone meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"spawn_main" in cmdline and int(entry.name) != os.getpid():
            out.append(int(entry.name))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the workers in /proc")
@pytest.mark.timeout(120)
def test_a_worker_killed_while_the_sweep_runs_ends_it_with_an_error_not_a_hang(tmp_path):
    """A worker killed mid-chunk (as the kernel's OOM killer does) lost its chunk, and
    multiprocessing.Pool, which starts another in its place, never reported it: the sweep
    waited for ever. Here every worker the sweep starts is killed as it appears."""
    import os
    import signal
    import subprocess
    import time

    from childenv import child_env

    path = tmp_path / "slow.toml"
    path.write_text(SLOW_POINTS)
    proc = subprocess.Popen([sys.executable, "-m", "gpuwrite", "sweep", str(path), "--results",
                             str(tmp_path / "r"), "--workers", "2", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    killed = 0
    deadline = time.monotonic() + 60
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            for pid in _spawned_workers(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=30)
    assert killed > 0
    assert proc.returncode == 1, (proc.returncode, err[-2000:])
    error = json.loads(out)["error"]
    assert "worker process(es) died (signal 9" in error and "Traceback" not in err


def test_a_finished_sweep_clears_its_own_chunks_not_those_of_a_sweep_whose_name_it_begins(tmp_path, monkeypatch):
    """Sweep "a" done: its chunks go; the chunks "a-b" (another sweep, interrupted) left stay."""
    path = tmp_path / "two.toml"
    lat = SPEC.split("[[sweep]]")[1]
    path.write_text("[[sweep]]" + lat.replace('"lat"', '"a"') + "[[sweep]]" + lat.replace('"lat"', '"a-b"')
                    .replace("across_sockets", "same_switch"))
    spec = load_spec(path)
    assert [s.name for s in spec.sweeps] == ["a", "a-b"]
    real = backends.compute
    _interrupt_at(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        run_spec(spec, tmp_path, only=["a-b"], pool=Pool(1))
    monkeypatch.setattr(backends, "compute", real)
    left = sorted(p.name for p in (tmp_path / "cache" / "two").glob("*.parquet"))
    assert len(left) == 2
    run_spec(spec, tmp_path, only=["a"], pool=Pool(1))
    assert sorted(p.name for p in (tmp_path / "cache" / "two").glob("*.parquet")) == left
    assert run_spec(spec, tmp_path, only=["a-b"], pool=Pool(1))["reports"][0].cached == 2


def test_two_sweeps_of_one_file_writing_at_once_keep_each_others_rows(spec, tmp_path, monkeypatch):
    """Sweep "sim" and sweep "lat" of one file finish together: the second to write merges
    into the table the first wrote, not into the one it read before (which lost the other's
    rows without a word, and that run had deleted its chunks)."""
    import threading

    from gpuwrite.experiments import sweep as sweep_module

    real_merge = sweep_module._merge
    other = threading.Thread(target=run_spec, args=(spec, tmp_path), kwargs={"only": ["lat"], "pool": Pool(1)})

    def merge_while_another_writes(old, new, spec_):
        if set(new["sweep"]) == {"sim"} and other.ident is None:
            other.start()               # "lat" (analytic, fast) finishes while "sim" holds the table it read
            other.join(timeout=5)       # with the lock it waits for "sim" to write first
        return real_merge(old, new, spec_)

    monkeypatch.setattr(sweep_module, "_merge", merge_while_another_writes)
    run_spec(spec, tmp_path, only=["sim"], pool=Pool(1))
    other.join()
    assert set(pd.read_parquet(tmp_path / "tiny.parquet")["sweep"]) == {"lat", "sim"}
