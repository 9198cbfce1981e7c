"""The software NIC keeps a real NIC's promises under misuse (issue 12), one test per defect.

Tests that could corrupt or kill the process on a broken engine run their scenario in a
subprocess (``_run``), so a crash is a failure rather than a lost test run.
"""
import math
import subprocess
import sys
import textwrap
from pathlib import Path

from childenv import child_env

import numpy as np
import pytest

from gwtest import ACCESS_RW, canaried
from gpuwrite import layouts as L
from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.cudaenv import cuda
from gpuwrite.device import verbs as dv
from gpuwrite.host.verbs import Context, LinkConfig, VerbsError
from gpuwrite.host.wqe import HostPoster, rdma_write
from gpuwrite.paths import runner

ROOT = Path(__file__).resolve().parents[2]
# Where the gpuwrite this test imported lives (site-packages under README's `pytest -P`,
# the checkout when the extension was built in place): child processes import the same one.


def _run(script: str, timeout_s: float = 60) -> str:
    """Runs ``script`` in a fresh interpreter on this tree; returns its stdout. A crash
    (signal, glibc abort) or a hang fails the test with what the child printed."""
    env = child_env()
    proc = subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(script)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, (f"child exited with {proc.returncode}\n"
                                  f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}")
    return proc.stdout


# -- 1. ownership: a context dropped without close() ---------------------------------------

def test_dropped_contexts_stop_their_engine_before_memory_is_freed_and_do_not_leak():
    out = _run("""
        import gc, time, weakref
        import numpy as np
        from gpuwrite.host.verbs import Context, VerbsError

        def rss_kb():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4

        def make():
            ctx = Context(); ctx.start()
            ctx.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16, stage_slots=4,
                                         stage_slot_bytes=64, bounce_bytes=64)
            return weakref.ref(ctx)

        # Started and dropped: the engine thread must be gone before the rings are freed,
        # so arrays allocated afterwards (in the same memory) keep their bytes.
        refs = [make() for _ in range(3)]
        gc.collect()
        assert all(r() is None for r in refs), "a dropped context was not collected"
        time.sleep(0.1)
        bufs = [np.full(n, 0xFF, np.uint8) for n in (8, 16, 64, 256, 1024, 4096)
                for _ in range(300)]
        time.sleep(0.5)
        print("overwritten", sum(int((b != 0xFF).sum()) for b in bufs))

        # Never started and dropped: each used to leak its engine (about 630 KB).
        for _ in range(20):
            Context()
        gc.collect()
        before = rss_kb()
        for _ in range(300):
            Context()
        gc.collect()
        print("leak_kb", rss_kb() - before)

        ctx = Context()
        ctx.close()
        ctx.close()                     # idempotent
        for call in (ctx.start, ctx.stop, ctx.counters, ctx.poll, lambda: ctx.running,
                     lambda: ctx.alloc_pd().create_queues(1),
                     lambda: ctx.alloc_pd().reg_mr(np.zeros(8, np.uint8))):
            try:
                call()
                print("accepted")
            except VerbsError as e:
                assert "context is closed" in str(e), e
        print("closed ok")
    """)
    assert "overwritten 0" in out
    leak_kb = int(out.split("leak_kb ")[1].split()[0])
    assert leak_kb < 30_000, f"300 dropped contexts kept {leak_kb} KB"   # was ~190 MB
    assert "accepted" not in out and "closed ok" in out


# -- 2. invalidation: deregistration and QP destruction with WQEs in flight ----------------

def test_deregistration_and_queue_close_with_wqes_in_flight():
    out = _run("""
        import time
        import numpy as np
        from gpuwrite import layouts as L
        from gpuwrite.host.verbs import Context, LinkConfig
        from gpuwrite.host.wqe import HostPoster, rdma_write

        def wait(p, timeout_s=5.0):
            end = time.monotonic() + timeout_s
            while time.monotonic() < end:
                c = p.poll()
                if c is not None:
                    return c
                time.sleep(0.001)
            return None

        # 64 KiB over a 0.02 Gb/s link of 256-byte packets takes about 26 ms.
        ctx = Context(link=LinkConfig(rate_gbps=0.02, mtu_bytes=256))
        src = np.full(1 << 16, 7, np.uint8)
        qpd = ctx.alloc_pd()
        p = HostPoster(qpd.create_queues(1, sq_bbs=16, ncqe=16))
        smr = qpd.reg_mr(src)
        for how in ("dereg", "pd_close"):
            pd = ctx.alloc_pd()
            whole = np.zeros((4 << 20) + 512, np.uint8)
            whole[:256] = whole[-256:] = 0xA5
            dst = whole[256:-256]
            dmr = pd.reg_mr(dst, access=3)
            p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 1 << 16, dmr.address,
                               dmr.rkey))
            p.ring()
            if not ctx.running:
                ctx.start()
            end = time.monotonic() + 5
            while not dst[0] and time.monotonic() < end:   # the first packet has landed
                time.sleep(0.0002)
            dmr.deregister() if how == "dereg" else pd.close()
            snap = whole.copy()
            time.sleep(0.05)
            c = wait(p)
            time.sleep(0.02)
            print(how, "moved_after", int((whole != snap).sum()), "written_before",
                  int((snap[256:-256] != 0).sum()), c and c.describe())
            del dst, dmr, pd
            ctx.stop()
            p.q.reset(0)
            p.reset()

        # A queue set closed while its engine runs: what was posted is flushed, what is
        # posted afterwards never completes and moves no byte.
        qs = qpd.create_queues(1, sq_bbs=16, ncqe=16)
        q = HostPoster(qs)
        dst = np.zeros(3 << 16, np.uint8)
        dmr = qpd.reg_mr(dst, access=3)
        ctx.start()
        for k in range(3):      # about 80 ms of link time in all
            q.write(rdma_write(q.pi, q.qpn, smr.address, smr.lkey, 1 << 16,
                               dmr.address + (k << 16), dmr.rkey))
        q.ring()
        time.sleep(0.001)
        qs.close()
        got = [q.poll() for _ in range(4)]
        print("at_close", [c.describe() if c else None for c in got])
        snap = dst.copy()
        q.write(rdma_write(q.pi, q.qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey))
        q.ring()
        time.sleep(0.1)
        print("after_close", q.poll(), int((dst != snap).sum()))

        # Closing a QP whose ring the poster overran: one error completion, no hang.
        qs = qpd.create_queues(1, sq_bbs=16, ncqe=16)
        q = HostPoster(qs)
        for _ in range(20):
            q.write(rdma_write(q.pi, q.qpn, smr.address, smr.lkey, 8, dmr.address, dmr.rkey))
        ctx.stop()
        q.ring()
        qs.close()
        print("overrun", [c.describe() for c in iter(q.poll, None)])
        ctx.close()
    """)
    lines = {line.split()[0]: line for line in out.splitlines()}
    for how in ("dereg", "pd_close"):
        line = lines[how]
        assert " moved_after 0 " in line, line
        assert "written_before 0 " not in line, f"the test's WQE was not in flight: {line}"
        # Deregistering the destination, or the PD (its source region goes first).
        assert ("remote_access_err (0x13), reason rkey_invalidated" in line
                or "local_prot_err (0x04), reason lkey_invalidated" in line), line
    at_close = lines["at_close"]
    assert at_close.count("wr_flush_err") + at_close.count(": ok,") == 3, at_close
    assert "wr_flush_err" in at_close and at_close.endswith("None]"), at_close
    assert lines["after_close"] == "after_close None 0"
    assert lines["overrun"] == "overrun ['wqe 0: error local_qp_op_err (0x02), reason ring_overflow']"


# -- 3. the inline flag only in an inline segment --------------------------------------

def test_a_data_segment_of_2_31_bytes_is_a_length_error(nic):
    pd = nic.alloc_pd()
    src = np.ones(64, np.uint8)
    whole, dst, _ = canaried(64)
    smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
    p = HostPoster(pd.create_queues(1, sq_bbs=16, ncqe=16))
    with pytest.raises(ValueError, match="length=2147483648"):
        rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 2**31, dmr.address, dmr.rkey)
    got = []
    for count in (2**31, 0xFFFFFFFF, 2**31 + 4):
        wqe = bytearray(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 16, dmr.address,
                                   dmr.rkey))
        wqe[L.DATA_BASE:L.DATA_BASE + 4] = count.to_bytes(4, "big")   # byte_count, raw
        p.write(bytes(wqe))
        p.ring()
        nic.poll(4)
        got.append(p.poll())
        p.q.reset(0)
        p.reset()
    # 2^31: no inline segment is empty; 2^32-1: too long; 2^31+4: a 4-byte inline payload
    # would need 3 segments but (ds 3) fits, so it is taken for one, as mlx5 would.
    assert [(c.syndrome, L.reason_name(c.reason)) for c in got[:2]] == \
        [(L.SYNDROME["local_length_err"], "length")] * 2
    assert got[2].ok and got[2].byte_count == 4
    assert np.all(whole[:256] == 0xA5) and np.all(whole[-256:] == 0xA5)
    assert np.all(dst[4:] == 0xA5)


# -- 4. ring allocation that wraps ---------------------------------------------------------

def test_messages_that_fit_the_ring_never_wait_forever():
    push = runner.run("gpu_push", [64, 1900], n_qps=1, stage_slots=8, stage_slot_bytes=256,
                      stage_credits="status", timeout_s=2)
    staged = runner.run("host_staged", [64, 4096], n_qps=1, bounce_bytes=4096, timeout_s=2)
    # Credits from completions: the 12-slot run wraps and needs the slots of WQEs posted
    # unsignaled; the wait asks for their completion (a signaled NOP) instead of hanging.
    by_cqe = runner.run("gpu_push", [64] * 7 + [2900], n_qps=1, batch=8, stage_slots=16,
                        stage_slot_bytes=256, stage_credits="completions", timeout_s=2)
    assert (push.delivered, push.qp_errors) == (2, {})
    assert (staged.delivered, staged.qp_errors) == (2, {})
    assert (by_cqe.delivered, by_cqe.qp_errors) == (8, {})

    # A bounce wait that times out says what it waited for.
    with Context() as ctx:          # never started: no space ever comes back
        qs = ctx.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16, bounce_bytes=64)

        @cuda.jit
        def reserve_twice(Q, out):
            if cuda.threadIdx.x == 0:
                st, word = dv.bounce_reserve(Q, 0, 12, 50_000_000)
                out[0] = st
                st, word = dv.bounce_reserve(Q, 0, 12, 50_000_000)
                out[1] = st

        out = cuda.to_device(np.zeros(2, dtype=np.int64))
        reserve_twice[1, 1](qs.device_args, out)
        cuda.synchronize()
        got = out.copy_to_host()
    assert got[0] == dv.OK and got[1] == dv.E_TIMEOUT_BOUNCE
    assert "bounce-buffer space" in dv.ERROR_NAMES[dv.E_TIMEOUT_BOUNCE]


# -- 5. queue sets of max_qps queues; numbers given back ------------------------------------

def test_create_queues_of_max_qps_and_numbers_come_back():
    with Context(max_qps=2, max_mrs=4) as ctx:     # 3 region keys: indices 1, 2, 3
        pd = ctx.alloc_pd()
        qs = pd.create_queues(1, sq_bbs=16, ncqe=16)               # 2 keys, CQ 1
        with pytest.raises(VerbsError, match="out of memory-region keys"):
            pd.create_queues(1, sq_bbs=16, ncqe=16)                # takes CQ 2, then fails
        qs.close()
        both = pd.create_queues(2, sq_bbs=16, ncqe=16)             # every CQ and key again
        assert sorted(both.cqns.tolist()) == [1, 2]
        both.close()
        again = pd.create_queues(2, sq_bbs=16, ncqe=16)
        assert sorted(again.cqns.tolist()) == [1, 2]


# -- 6. every configuration value is checked, with a clear error ----------------------------

@pytest.mark.parametrize("make, named", [
    (lambda: LinkConfig(rate_gbps=math.nan), "rate_gbps=nan"),
    (lambda: LinkConfig(rate_gbps=math.inf), "rate_gbps=inf"),
    (lambda: LinkConfig(rate_gbps=1e-300), "rate_gbps=1e-300"),
    (lambda: LinkConfig(rate_gbps=1e30), "rate_gbps=1e+30"),
    (lambda: LinkConfig(drain_gbps=-1.0), "drain_gbps=-1.0"),
    (lambda: LinkConfig(rx_credits=2**32), "rx_credits=4294967296"),
    (lambda: LinkConfig(credit_latency_ns=1.5), "credit_latency_ns=1.5"),
    (lambda: Context(max_qps=0), "max_qps=0"),
    (lambda: Context(workers=-1), "workers=-1"),
    (lambda: Context(idle_sleep_ns=10**9), "idle_sleep_ns=1000000000"),
    (lambda: Context().alloc_pd().reg_mr(np.zeros(8, np.uint8), access=8), "access=0x8"),
    (lambda: Context().alloc_pd().reg_mr(np.zeros(0, np.uint8)), "0 bytes"),
    (lambda: Context().alloc_pd().create_queues(1, poll_delay_ns=1.5), "poll_delay_ns=1.5"),
    (lambda: Context().alloc_pd().create_queues(1, poll_adapt="yes"), "poll_adapt='yes'"),
    (lambda: Context().alloc_pd().create_queues(1, stage_slots=2**32), "stage_slots=4294967296"),
])
def test_bad_configuration_values_are_refused_by_name(make, named):
    with pytest.raises(ValueError) as err:
        make()
    assert named in str(err.value) and ("allowed" in str(err.value) or "at least" in str(err.value))


def test_the_engine_refuses_bad_values_given_to_it_directly():
    """The C layer checks too (other callers than these classes exist: the testbed)."""
    err = ffi.new("char[]", 256)
    for field, value in (("rate_gbps", math.nan), ("rate_gbps", 1e-300), ("rate_gbps", math.inf),
                         ("drain_gbps", 1e30)):
        cfg = ffi.new("struct gw_engine_config *")
        cfg.workers, cfg.max_qps, cfg.max_cqs, cfg.max_mrs = 1, 4, 5, 16
        setattr(cfg.link, field, value)
        assert lib.gw_engine_create(cfg, err, 256) == ffi.NULL, (field, value)
        assert "Gb/s" in ffi.string(err).decode()
    cfg.link.drain_gbps = 0
    cfg.max_qps = 0
    assert lib.gw_engine_create(cfg, err, 256) == ffi.NULL
    assert "max_qps=0" in ffi.string(err).decode()
    cfg.max_qps = 4
    engine = lib.gw_engine_create(cfg, err, 256)
    assert engine != ffi.NULL
    buf = np.zeros(64, np.uint8)
    try:
        assert lib.gw_engine_add_mr(engine, 0x100, buf.ctypes.data, 64, 8, 0, 0, 0, err, 256) == -1
        assert "access=0x8 has unknown bits" in ffi.string(err).decode()
        assert lib.gw_engine_add_mr(engine, 0x100, buf.ctypes.data, 64, 1, 0, 2, 0, err, 256) == -1
        assert "flags=0x2 has unknown bits" in ffi.string(err).decode()
        assert lib.gw_engine_add_mr(engine, 0x100, buf.ctypes.data, 0, 1, 0, 0, 0, err, 256) == -1
        assert "nonempty" in ffi.string(err).decode()
    finally:
        lib.gw_engine_destroy(engine)
