"""Misuse of the device API, Session, runner.run and PullAgent: each is refused by name, or
gives back what it took, instead of failing deep inside or leaving the engine changed."""
import time

import numpy as np
import pytest
from numba import int64
from numba.core.errors import TypingError

from gwtest import ACCESS_RW
from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device import api
from gpuwrite.host.verbs import Context, VerbsError
from gpuwrite.host.wqe import HostPoster, rdma_write
from gpuwrite.paths import pull_agent as pa
from gpuwrite.paths import runner

SLOTS1 = api.slots_shape(1)
FIXED = api.Thresholds.fixed("gpu_push")


@cuda.jit
def _send(Q, cfg, qp, scope, src, nbytes, raddr, rkey, lkey, out):
    """One put, quiet and close on QP ``qp`` (scope 0: open_thread, else open_block);
    ``out``: put's, quiet's and the handle's status after close."""
    sh = cuda.shared.array(SLOTS1, int64)
    if cuda.threadIdx.x == 0:
        for c in range(api.ROW_COLS):       # what an earlier kernel left in shared memory
            sh[0, 0, c] = 7
            sh[0, 1, c] = 7
    cuda.syncthreads()
    if scope == 0:
        if cuda.threadIdx.x != 0:
            return
        h = api.open_thread(Q, cfg, qp, sh, 0)
    else:
        h = api.open_block(Q, cfg, qp, sh)
    a = api.put(h, src, 0, nbytes, raddr, rkey, lkey, api.GPU_PUSH)
    b = api.quiet(h)
    api.close(h)
    if cuda.threadIdx.x == 0:
        out[0], out[1], out[2] = a, b, api.status_of(h)


def _send_once(s, qp, scope, src, smr, dmr, nbytes=64):
    out = cuda.to_device(np.full(3, 99, dtype=np.int64))
    _send[1, 4](s.Q, s.cfg, qp, scope, src, nbytes, dmr.address, dmr.rkey, smr.lkey, out)
    cuda.synchronize()
    return [int(x) for x in out.copy_to_host()]


# ---- 1. open_* of a QP index outside Q -------------------------------------------------
@pytest.mark.parametrize("qp, scope", [(1, 1), (-1, 1), (7, 0), (-2, 0)])
def test_open_of_a_qp_outside_the_session_fails_the_handle_by_name(qp, scope):
    """qp=1 on a 1-QP session raised IndexError inside the kernel on the simulator (a
    read past Q_INFO's rows and writes past the rings on a GPU); qp=-1 reached the last
    QP's rows through numpy's negative index and an empty slice of the rings."""
    ok = [api.OK, api.OK, api.E_CLOSED]
    with api.Session(1, thresholds=FIXED, timeout_s=2) as s:
        src, smr = s.source(np.arange(1, 17, dtype=np.uint32))
        dst, dmr = s.receive(16)
        s.start()
        assert _send_once(s, 0, scope, src, smr, dmr) == ok
        state = s.queues.gpu_state()
        dst.host[:] = 0
        assert _send_once(s, qp, scope, src, smr, dmr) == [api.E_BAD_QP] * 3
        assert not dst.host.any()
        assert (s.queues.gpu_state() == state).all()    # close stored no state anywhere
        assert _send_once(s, 0, scope, src, smr, dmr) == ok
        assert (dst.host == np.arange(1, 17)).all()
    assert "QP index outside the session's QPs" in api.error_name(api.E_BAD_QP)


# ---- 2. a source that is not uint32 words ----------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.uint64])
def test_put_of_a_source_that_is_not_uint32_words_is_refused_by_name(dtype):
    """A uint8 source died in the simulator's alignment check (a misaligned vector load
    on a GPU); a uint64 one sent its words as if they were uint32. Refused where the
    kernel is typed (on a GPU, at compile time), before anything is posted."""
    with api.Session(1, thresholds=FIXED, timeout_s=2) as s:
        src = cuda.to_device(np.arange(1, 65).astype(dtype)[:64 // np.dtype(dtype).itemsize])
        smr = s.pd.reg_mr(src, access=L.ACCESS_LOCAL_WRITE)
        dst, dmr = s.receive(16)
        s.start()
        with pytest.raises(TypingError, match=rf"src is dtype {np.dtype(dtype).name}, 1-D; "
                                              r"allowed a 1-D array of uint32 words"):
            _send_once(s, 0, 1, src, smr, dmr)
        assert not dst.host.any()


@pytest.mark.skipif(not SIMULATOR, reason="the simulator's twin of the typing check")
def test_the_gpu_typing_check_refuses_what_the_simulator_refuses():
    """The GPU build's check is an intrinsic that types the source and emits no code: the
    same words as the simulator's, for the same arrays."""
    api._require_words(np.zeros(4, np.uint32))
    for bad, what in ((np.zeros(4, np.int32), "dtype int32, 1-D"),
                      (np.zeros((2, 2), np.uint32), "dtype uint32, 2-D")):
        with pytest.raises(TypingError, match=what):
            api._require_words(bad)


# ---- 3. a closed Session ---------------------------------------------------------------
def test_a_closed_session_refuses_every_use_by_name():
    """source, receive, start and describe raised AttributeError on None; Q, queues and
    qp_errors went on with the closed session's dead queues."""
    s = api.Session(1, thresholds=FIXED)
    s.close()
    uses = {"source": lambda: s.source(np.arange(4, dtype=np.uint32)),
            "receive": lambda: s.receive(4), "start": s.start, "describe": s.describe,
            "Q": lambda: s.Q, "queues": lambda: s.queues, "pd": lambda: s.pd,
            "context": lambda: s.context, "qp_errors": lambda: s.qp_errors([api.OK]),
            "agent_report": s.agent_report, "with": lambda: s.__enter__(),
            "agent_running": lambda: s.agent_running().__enter__()}
    for name, use in uses.items():
        with pytest.raises(VerbsError, match="the session is closed"):
            use()
            pytest.fail(name)
    s.close()       # twice: nothing to do


# ---- 4. Sessions and runs on the caller's context ---------------------------------------
def _held(ctx):
    """Queue sets and regions the context's engine still holds."""
    return len(ctx._keep), sorted(k for k in ctx._eng.pins if k[0] in ("mr", "queues"))


def test_sessions_on_a_callers_context_give_back_their_queues_and_regions():
    """Each Session(context=ctx) left its QPs polled and its CQ numbers taken: the third
    of 2 QPs on max_qps=4 failed "2 completion queues asked for, 0 left"."""
    with Context(max_qps=4) as ctx:
        for _ in range(3):
            with api.Session(2, context=ctx, thresholds=FIXED) as s:
                s.source(np.arange(4, dtype=np.uint32))
                s.receive(4)
                assert _held(ctx)[0] == 1
            assert _held(ctx) == (0, [])
            assert not ctx.closed


def test_runs_on_a_callers_context_give_back_their_queues_and_regions():
    """runner.run(context=ctx) never closed its queues nor deregistered its regions: the
    third run of 2 QPs on max_qps=4 failed, and every run pinned its buffers for good.
    A run that fails half-way gives them back too."""
    with Context(max_qps=4) as ctx:
        for _ in range(3):
            r = runner.run("gpu_push", [64, 128], n_qps=2, context=ctx, timeout_s=5)
            assert r.delivered == r.messages == 2 and not r.qp_errors
            assert _held(ctx) == (0, [])

        class Refused(Exception):
            pass

        def refuse():
            raise Refused("before the launch")

        with pytest.raises(Refused):
            runner.run("gpu_push", [64], n_qps=2, context=ctx, around_kernel=refuse)
        assert _held(ctx) == (0, [])
        assert not ctx.closed


# ---- 5. PullAgent.start that cannot launch ----------------------------------------------
def _write_from_gpu_memory(ctx):
    """One 64-byte RDMA write from "GPU memory" (a pull): its completion, how long the
    engine took, and whether the bytes arrived."""
    pd = ctx.alloc_pd()
    src = cuda.to_device(np.arange(16, dtype=np.uint32))
    smr = pd.reg_mr(src, access=L.ACCESS_LOCAL_WRITE)
    dst = np.zeros(16, np.uint32)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    p = HostPoster(pd.create_queues(1, sq_bbs=16, ncqe=16))
    p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey))
    p.ring()
    t = time.monotonic()
    ctx.poll(4)
    c = p.poll()
    took_s = time.monotonic() - t
    ok = bool((dst == np.arange(16)).all())
    pd.close()
    return c, took_s, ok


def _assert_left_as_it_was(ctx):
    assert pa._PIN not in ctx._eng.pins
    c, took_s, ok = _write_from_gpu_memory(ctx)
    assert c is not None and c.ok and ok, c.describe() if c else None
    assert took_s < 0.2


@pytest.mark.skipif(not SIMULATOR, reason="the simulator's refusal")
def test_an_agent_refused_on_the_simulator_leaves_the_engine_as_it_was():
    """start() pointed the engine at the agent's ring and pinned the agent, then raised:
    every later pull waited pull_timeout_s and failed pull_failed."""
    with Context() as ctx:
        with pytest.raises(RuntimeError, match="simulator runs one kernel at a time"):
            pa.PullAgent(ctx, pull_timeout_s=0.5).start()
        _assert_left_as_it_was(ctx)
        # The stand-in agents of test_agent.py: attached, never launched.
        agent = pa.PullAgent(ctx, pull_timeout_s=0.5).start(launch=False)
        assert ctx._eng.pins[pa._PIN] is agent
        agent.stop()
        assert pa._PIN not in ctx._eng.pins


def test_an_agent_whose_launch_fails_is_detached(monkeypatch):
    """On a GPU a launch that fails (here: the stream, where the simulator refuses an
    external stream) left the engine pointed at a ring no kernel serves."""
    import ctypes

    destroyed = []
    handle = ctypes.c_void_p(0x5EED)

    class Driver:
        def cuStreamDestroy_v2(self, handle):
            destroyed.append(handle.value)
            return 0

    def stream():
        return Driver(), handle

    def refused(handle_value):
        raise RuntimeError("the launch failed")

    monkeypatch.setattr(pa, "SIMULATOR", False)
    monkeypatch.setattr(pa, "_nonblocking_stream", stream)
    monkeypatch.setattr(pa.cuda, "external_stream", refused)
    with Context() as ctx:
        agent = pa.PullAgent(ctx, pull_timeout_s=0.5)
        with pytest.raises(RuntimeError, match="the launch failed"):
            agent.start()
        assert destroyed == [0x5EED] and agent._stream is None
        assert agent not in pa._KEPT
        _assert_left_as_it_was(ctx)
