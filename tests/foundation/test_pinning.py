"""Engine threads on CPUs of their own (``Context(pin_threads=...)``): which CPUs the rule
picks, that each named engine thread really runs only there, that a bad choice is refused
with the value and what is allowed, and that a run reports where its engine ran."""
import os

import pytest

from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.host import verbs
from gpuwrite.host.verbs import Context, engine_thread_cpus
from gpuwrite.paths import runner

pytestmark = pytest.mark.timeout(60)


def _engine_threads(ctx: Context) -> dict:
    """{thread name: its CPUs} of the threads ``ctx.start()`` creates."""
    before = set(os.listdir("/proc/self/task"))
    ctx.start()
    out = {}
    for tid in set(os.listdir("/proc/self/task")) - before:
        with open(f"/proc/self/task/{tid}/comm") as f:
            out[f.read().strip()] = os.sched_getaffinity(int(tid))
    return out


def test_the_scheduler_places_engine_threads_unless_told(monkeypatch):
    monkeypatch.setattr(verbs, "process_cpus", lambda: list(range(16)))
    assert engine_thread_cpus(8, 6) == engine_thread_cpus(8, 6, False) == ()
    with Context(workers=1, copy_threads=0) as ctx:
        assert ctx.thread_cpus == ()
    # asked for: from the highest CPU down, workers first
    assert engine_thread_cpus(8, 6, True) == tuple(range(15, 1, -1))


def test_pinning_asked_for_needs_only_a_cpu_per_thread(monkeypatch):
    monkeypatch.setattr(verbs, "process_cpus", lambda: [0, 2, 4, 6])
    assert engine_thread_cpus(3, 1, True) == (6, 4, 2, 0)
    with pytest.raises(ValueError, match=r"pin_threads=True: 4 worker\(s\) and 1 copy helper\(s\) "
                                         r"need 5 CPUs of their own; this process may run on 4 "
                                         r"\(0,2,4,6\)"):
        engine_thread_cpus(4, 1, True)


@pytest.mark.parametrize("pin, message", [
    ([4, 4], r"pin_threads=\[4, 4\]: give 2 distinct CPUs .* from this process's 0-1,4-5$"),
    ([4, 3], r"not among them: \[3\]"),
    ([5], r"give 2 distinct CPUs"),
    ("ab", r"pin_threads='ab': allowed True, False or a sequence of CPU numbers"),
    (7, r"pin_threads=7: allowed"),
    (None, r"pin_threads=None: allowed"),
])
def test_a_list_of_cpus_is_checked_against_the_process(monkeypatch, pin, message):
    monkeypatch.setattr(verbs, "process_cpus", lambda: [0, 1, 4, 5])
    with pytest.raises(ValueError, match=message):
        engine_thread_cpus(1, 1, pin)
    assert engine_thread_cpus(1, 1, [5, 0, 1]) == (5, 0)       # extra CPUs go unused


@pytest.mark.skipif(len(verbs.process_cpus()) < 2, reason="needs two CPUs")
def test_each_engine_thread_runs_only_on_its_cpu():
    cpus = verbs.process_cpus()
    with Context(workers=1, copy_threads=1, pin_threads=[cpus[-1], cpus[0]]) as ctx:
        threads = _engine_threads(ctx)
        assert ctx.thread_cpus == (cpus[-1], cpus[0])
        assert threads == {"gw-worker-0": {cpus[-1]}, "gw-copy-0": {cpus[0]}}
    with Context(workers=1, copy_threads=1, pin_threads=False) as ctx:
        assert ctx.thread_cpus == ()
        assert _engine_threads(ctx) == {"gw-worker-0": set(cpus), "gw-copy-0": set(cpus)}


def _config(cpu: int):
    cfg = ffi.new("struct gw_engine_config *")
    cfg.policy, cfg.workers, cfg.max_qps, cfg.max_cqs, cfg.max_mrs = 0, 1, 1, 2, 2
    cfg.pin_threads = 1
    cfg.thread_cpu[0] = cpu
    return cfg


def test_the_engine_refuses_a_cpu_it_cannot_pin_to():
    err = ffi.new("char[]", 256)
    assert lib.gw_engine_create(_config(lib.GW_MAX_CPU + 1), err, 256) == ffi.NULL
    assert ffi.string(err).decode() == f"thread_cpu[0]={lib.GW_MAX_CPU + 1}: allowed 0 to " \
                                       f"{lib.GW_MAX_CPU}"
    # a CPU outside the process's mask: the thread cannot start, and start says where
    outside = next(c for c in range(lib.GW_MAX_CPU, -1, -1) if c not in verbs.process_cpus())
    eng = lib.gw_engine_create(_config(outside), err, 256)
    assert eng != ffi.NULL
    try:
        assert lib.gw_engine_start(eng, err, 256) == -1
        assert ffi.string(err).decode() == \
            f"cannot start engine thread 0 on CPU {outside}: Invalid argument"
        assert not lib.gw_engine_running(eng)
    finally:
        lib.gw_engine_destroy(eng)


def test_a_run_reports_where_its_engine_ran():
    cpu = verbs.process_cpus()[-1]
    with Context(workers=1, copy_threads=0, pin_threads=[cpu]) as ctx:
        r = runner.run("gpu_push", [256] * 4, n_qps=1, context=ctx)
    assert r.delivered == 4 and r.engine_cpus == [cpu]
    assert r.row()["engine_cpus"] == [cpu]
    unpinned = runner.run("gpu_push", [256] * 2, n_qps=1)
    assert unpinned.delivered == 2 and unpinned.engine_cpus == []


def test_a_context_that_cannot_pin_is_not_made(monkeypatch):
    monkeypatch.setattr(verbs, "process_cpus", lambda: [0])
    with pytest.raises(ValueError, match=r"need 2 CPUs"):
        Context(workers=2, copy_threads=0, pin_threads=True)
