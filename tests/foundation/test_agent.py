"""nic_pull's GPU-resident pull agent (gpuwrite.paths.pull_agent): every byte delivered,
and a named error completion, not a hang, when the agent is gone."""
import time

import numpy as np
import pytest

from gpuwrite import layouts as L
from gpuwrite._gw_cffi import lib
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.host.memory import mapped
from gpuwrite.host.verbs import Context
from gpuwrite.paths import runner
from gpuwrite.paths import pull_agent as pa
from gpuwrite.paths.pull_agent import PullAgent

gpu = pytest.mark.skipif(SIMULATOR, reason="the simulator runs one kernel at a time: the "
                         "agent cannot run beside the sender there")
# Odd lengths (a partial last word), a 4-byte-aligned but not 16-byte-aligned source after
# them, and more than one unrolled round of the agent's block.
PULL_TIMEOUT_S = 0.2
SIZES = [64, 3, 1000, 4096, 5, 65536, 17, 300000]


def _pull_with_agent_gone(agent_kwargs, launch):
    with Context() as ctx:
        agent = PullAgent(ctx, pull_timeout_s=PULL_TIMEOUT_S, **agent_kwargs).start(launch=launch)
        if launch:
            time.sleep(0.5)     # the agent's idle timeout passes: it has left
        # "copy_engine": the runner launches no agent of its own; the engine still sends
        # its pulls to the ring set above, which nothing serves.
        r = runner.run("nic_pull", [64, 256], n_qps=1, context=ctx, pull_agent="copy_engine",
                       timeout_s=10)
        report = agent.stop()
    return r, report


def _assert_pull_failed(r):
    assert r.delivered == 0
    (err,) = r.qp_errors.values()
    assert err["reason"] == "pull_failed", r.qp_errors
    # The error completion came when the pull timed out, not at the kernel's own timeout.
    assert PULL_TIMEOUT_S * 1e6 <= r.latency_p50_us < 2e6, r.latency_p50_us


def test_pulls_nobody_answers_fail_with_a_reason():
    """The engine points at a ring no agent serves (never launched): the pulls time out."""
    r, report = _pull_with_agent_gone({}, launch=False)
    _assert_pull_failed(r)
    assert report["engine_failed"] >= 1 and report["engine_answered"] == 0


@gpu
def test_agent_that_left_fails_pulls_with_a_reason():
    r, report = _pull_with_agent_gone({"idle_timeout_s": 0.01}, launch=True)
    _assert_pull_failed(r)
    assert report["exit"] == "left after its idle timeout"


@gpu
@pytest.mark.parametrize("threads", [32, 256])
def test_agent_delivers_every_byte(threads):
    r = runner.run("nic_pull", SIZES, n_qps=2, block_threads=threads)
    assert r.qp_errors == {}
    assert r.delivered == r.messages == len(SIZES)
    agent = r.counters["pull_agent"]
    assert agent["exit"] == "stopped"
    wqes = sum(-(-n // 65536) for n in SIZES)     # the runner's 64 KiB chunks
    assert agent["pulls"] == agent["engine_answered"] == wqes
    assert agent["bytes"] == sum(SIZES) and agent["engine_failed"] == 0
    assert "pull agent" in r.emulation


@gpu
def test_agent_split_batches_deliver_every_byte_with_its_helpers():
    """Pulls of up to 300 KB with odd lengths, one WQE each, batches split from 64 KiB on:
    the four blocks share the chunks (the helpers copied some) and every byte arrives."""
    sizes = [300000, 70001, 65536, 131075, 3, 262144, 99999, 4096] * 6
    kwargs = dict(n_qps=4, pull_agent="copy_engine", chunk_bytes=1 << 20, block_threads=256)
    with Context(workers=2) as ctx:
        # The sender's kernel is loaded before the agent runs, and frees of device memory
        # wait until it has stopped: a module's first load and a cuMemFree wait for every
        # running kernel (runner.run preloads the sender where it starts the agent itself).
        runner.run("nic_pull", sizes[:4], context=ctx, **kwargs)
        with cuda.defer_cleanup():
            agent = PullAgent(ctx, blocks=4, split_bytes=65536, pull_timeout_s=1.0).start()
            try:
                r = runner.run("nic_pull", sizes, context=ctx, **kwargs)
            finally:
                report = agent.stop()
    assert r.qp_errors == {} and r.delivered == r.messages == len(sizes)
    assert report["exit"] == "stopped" and report["engine_failed"] == 0
    assert report["pulls"] == report["engine_answered"] == len(sizes)
    assert report["bytes"] == sum(sizes)
    assert report["helped_chunks"] > 0, report


@gpu
def test_copy_engine_stand_in_still_delivers():
    r = runner.run("nic_pull", SIZES, n_qps=2, pull_agent="copy_engine")
    assert r.delivered == r.messages and "copy-engine" in r.emulation
    assert "pull_agent" not in r.counters


# -- a pull the agent answers late never lands in memory that was let go of -------------

def _late_pull(ctx, agent):
    """One RDMA write from "GPU memory" (host memory registered as device memory: the
    engine sends it to the agent) that no agent answers in time; returns the destination
    buffer, its region and the completion."""
    src, dst, dmr, poster, keep = _device_writes(ctx, 1)
    poster.ring()
    ctx.poll(4)          # the pull waits PULL_TIMEOUT_S for the agent, then fails
    return src, dst, dmr, poster.poll(), keep


def _device_writes(ctx, n=1, at=None):
    """``n`` 64-byte RDMA writes from "GPU memory" (host memory registered as device
    memory: the engine sends their pulls to the agent), written but not rung, write k from
    byte 64 k of the source to byte 64 k of the destination, or from ``at[k]`` = (source
    byte, destination byte); returns the source, the destination, its region, the poster
    and what must stay alive."""
    from gpuwrite.host.wqe import rdma_write

    at = [(64 * k, 64 * k) for k in range(n)] if at is None else at
    src, dst, smr, dmr, poster, keep = _one_qp(ctx, max(s for s, _ in at) + 64,
                                               max(d for _, d in at) + 64)
    for k, (s_at, d_at) in enumerate(at):
        poster.write(rdma_write(k, poster.q.qpns[0], smr.address + s_at, smr.lkey, 64,
                                dmr.address + d_at, dmr.rkey))
    return src, dst, dmr, poster, keep


def _one_qp(ctx, nsrc, ndst):
    """A QP and _regions(ctx, nsrc, ndst); returns the source, the destination, their
    regions, the QP's poster and what must stay alive."""
    from gpuwrite.host.wqe import HostPoster

    pd, src, dst, smr, dmr = _regions(ctx, nsrc, ndst)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    return src, dst, smr, dmr, HostPoster(qs), (pd, smr, qs)


def _regions(ctx, nsrc, ndst):
    """A PD, a source of ``nsrc`` bytes of "GPU memory" (mapped host memory registered as
    device memory: the GPU reaches it, and a stand-in agent on the host too) and a zeroed
    destination of ``ndst`` in mapped memory (which the agent may write into); returns the
    PD, the source, the destination and their regions."""
    from gwtest import ACCESS_RW

    pd = ctx.alloc_pd()
    src = mapped(nsrc, np.uint8).host
    src[:] = np.arange(nsrc) % 251 + 1
    dst = mapped(ndst, np.uint8).host
    smr = pd.reg_mr(src, access=L.ACCESS_LOCAL_WRITE, kind=L.MEM_DEVICE)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    return pd, src, dst, smr, dmr


def _ring_and_finish(ctx, agent, server, poster, n):
    """Rings the doorbell, collects n completions (_completions), then stops the engine,
    the agent and its stand-in; returns the completions."""
    poster.ring()
    cqes = _completions(ctx, poster, n)
    ctx.stop()
    agent.stop()
    server.join(5)
    return cqes


def _completions(ctx, poster, n, timeout_s=10):
    """Starts the engine's worker and collects n completions (_collect)."""
    ctx.start()
    return _collect(poster, n, timeout_s)


def _collect(poster, n, timeout_s=10):
    """A QP's next n completions (fewer if they do not come within timeout_s)."""
    cqes = []
    deadline = time.monotonic() + timeout_s
    while len(cqes) < n and time.monotonic() < deadline:
        cqe = poster.poll()
        if cqe is not None:
            cqes.append(cqe)
        time.sleep(0.0005)
    return cqes


def _answer_late(agent, src, dst):
    """Plays an agent that was only slow: copies the first request's bytes, then answers."""
    slot = 0
    req = agent.ring.host[slot]
    mask = (1 << lib.GW_PULL_ADDR_BITS) - 1
    assert int(req[1]) & mask == src.ctypes.data and int(req[2]) & mask == dst.ctypes.data
    dst[:] = src
    agent.done.host[slot] = 1            # ticket 0 answered


def _stand_in_agent(agent, slots, *, expect=1, patience_s=0.0, delay_s=0.0):
    """A host thread that plays the agent (on the simulator "GPU memory" is host memory):
    it answers nothing until ``expect`` requests wait in the ring (or ``patience_s``
    passes), then answers the run of them from the next ticket, in ticket order, each
    ``delay_s`` after the last (the stop request at once), and so on until the stop
    request. Returns the thread and the list of how many requests each round found."""
    import ctypes
    import threading

    mask = (1 << lib.GW_PULL_ADDR_BITS) - 1
    rounds = []

    def posted(t):
        return int(agent.ring.host[t % slots][0]) >> 32 == t + 1

    def waiting(t):
        """How many requests wait from ticket t on, one after another."""
        n = 0
        while n < slots and posted(t + n):
            n += 1
        return n

    def serve():
        t = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not posted(t):
                time.sleep(0.0005)
                continue
            waited = time.monotonic() + patience_s
            while waiting(t) < expect and time.monotonic() < waited:
                time.sleep(0.0005)
            found = waiting(t)
            rounds.append(found)
            for u in range(t, t + found):
                req = agent.ring.host[u % slots]
                n = int(req[0]) & 0xFFFFFFFF
                if n == lib.GW_PULL_STOP_BYTES:
                    agent.done.host[u % slots] = u + 1
                    return
                time.sleep(delay_s)
                ctypes.memmove(int(req[2]) & mask, int(req[1]) & mask, n)
                agent.done.host[u % slots] = u + 1
            t += found

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    return server, rounds


def test_the_engine_times_its_round_trip_to_the_agent():
    """``pull_agent_ns``: every pull the agent answers adds the time from its request to its
    answer as the engine saw them (``pull_agent_answers`` counts them). A stand-in agent, a
    host thread that answers each request 20 ms after it sees it (and the stop request at
    once), makes the mean at least 20 ms; the bytes it copies land. On the simulator only,
    where "GPU memory" is host memory that a host thread can copy (on a GPU the engine's
    count beside the real agent's answers: BENCHMARKS.md, session 43)."""
    if not SIMULATOR:
        pytest.skip("the stand-in agent copies with memmove: the sources must be host memory")

    with Context() as ctx:
        agent = PullAgent(ctx, pull_timeout_s=5.0, slots=4).start(launch=False)
        server, _ = _stand_in_agent(agent, 4, delay_s=0.02)
        r = runner.run("nic_pull", [64, 256, 100], n_qps=1, context=ctx,
                       pull_agent="copy_engine", wait_each=True, timeout_s=10)
        report = agent.stop()
        server.join(5)
    assert r.delivered == r.messages == 3 and not r.qp_errors, r.qp_errors
    assert r.counters["pull_agent_answers"] == 3 == report["engine_answered"]
    assert 20e6 <= r.counters["pull_agent_ns"] / 3 < 5e9


def test_pulls_of_several_qps_are_in_flight_together():
    """A NIC keeps the reads of all the QPs it serves in flight at once, and so does the
    engine: four QPs of one worker, each with a 64-byte write from "GPU memory", rung
    together. A stand-in agent answers nothing until all four requests wait in its ring:
    an engine that waited for one QP's pull before posting the next QP's would show it one
    at a time (it then answers after its patience, 1.5 s, so the run still ends). Every
    write completes without error and delivers its bytes. (On a GPU: four QPs' 4 KiB
    pulls took 20 us each where one took 8, before; BENCHMARKS.md, session 45.)"""
    from gwtest import ACCESS_RW
    from gpuwrite.host.wqe import HostPoster, rdma_write

    if not SIMULATOR:
        pytest.skip("the stand-in agent copies with memmove: the sources must be host memory")
    n = 4
    with Context(workers=1) as ctx:
        agent = PullAgent(ctx, pull_timeout_s=5.0, slots=8).start(launch=False)
        server, rounds = _stand_in_agent(agent, 8, expect=n, patience_s=1.5)
        pd = ctx.alloc_pd()
        src = np.arange(64 * n, dtype=np.uint8) + 1
        dst = np.zeros(64 * n, dtype=np.uint8)
        smr = pd.reg_mr(src, access=L.ACCESS_LOCAL_WRITE, kind=L.MEM_DEVICE)
        dmr = pd.reg_mr(dst, access=ACCESS_RW)
        qs = pd.create_queues(n, sq_bbs=16, ncqe=16)
        posters = [HostPoster(qs, i) for i in range(n)]
        for i, p in enumerate(posters):
            p.write(rdma_write(0, qs.qpns[i], smr.address + 64 * i, smr.lkey, 64,
                               dmr.address + 64 * i, dmr.rkey))
        for p in posters:
            p.ring()
        ctx.start()
        cqes = [None] * n
        deadline = time.monotonic() + 20
        while any(c is None for c in cqes) and time.monotonic() < deadline:
            for i, p in enumerate(posters):
                cqes[i] = cqes[i] or p.poll()
            time.sleep(0.001)
        ctx.stop()
        agent.stop()
        server.join(5)
    assert all(c is not None and c.syndrome == 0 for c in cqes), cqes
    assert np.array_equal(dst, src)
    assert rounds[0] == n, rounds


def test_a_region_deregistered_under_a_pull_in_flight_is_let_go_of_after_it_lands():
    """The engine no longer waits for a pull in the pass that posted it, so a region can
    be deregistered while the agent still owes a write into it: deregistration returns
    only once that write has landed (and then no later pass writes there), and the WQE
    completes with rkey_invalidated, after the write, as a NIC's would."""
    import warnings

    if not SIMULATOR:
        pytest.skip("the stand-in agent copies with memmove: the sources must be host memory")
    with Context(workers=1) as ctx:
        agent = PullAgent(ctx, pull_timeout_s=5.0, slots=4).start(launch=False)
        # It waits for a second request that never comes: it answers 0.4 s after the first.
        server, rounds = _stand_in_agent(agent, 4, expect=2, patience_s=0.4)
        src, dst, dmr, poster, _keep = _device_writes(ctx)
        ctx.start()
        poster.ring()
        deadline = time.monotonic() + 10
        while int(agent.ring.host[0][0]) >> 32 != 1 and time.monotonic() < deadline:
            time.sleep(0.0005)
        assert not dst.any()                 # posted, not answered
        t0 = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dmr.deregister()
        took = time.monotonic() - t0
        assert np.array_equal(dst, src) and took >= 0.2, took
        cqe = None
        while cqe is None and time.monotonic() < deadline:
            cqe = poster.poll()
        ctx.stop()
        agent.stop()
        server.join(5)
    assert cqe is not None and L.reason_name(cqe.reason) == "rkey_invalidated", cqe
    assert rounds[0] == 1


def test_a_later_write_on_the_copy_engine_lands_after_an_earlier_one_at_the_agent():
    """A NIC places a QP's writes in order: where two overlap, the later's bytes are what
    stays. The engine sends a pull the agent cannot take (a source not 4-byte aligned) to
    the copy engine, whose copy lands when the worker syncs its stream; a stand-in agent
    answering 50 ms after each request holds the earlier write's pull, so an engine that
    did not wait for it first would let the earlier write land last. Both complete."""
    if not SIMULATOR:
        pytest.skip("the stand-in agent copies with memmove: the sources must be host memory")
    with Context(workers=1) as ctx:
        agent = PullAgent(ctx, pull_timeout_s=5.0, slots=4).start(launch=False)
        server, _ = _stand_in_agent(agent, 4, delay_s=0.05)
        src, dst, _dmr, poster, _keep = _device_writes(ctx, at=[(0, 0), (130, 0)])
        cqes = _ring_and_finish(ctx, agent, server, poster, 2)
    assert len(cqes) == 2 and all(c.syndrome == 0 for c in cqes), cqes
    assert np.array_equal(dst, src[130:194])


def test_a_later_pull_lands_after_an_earlier_write_the_engine_places_itself():
    """Write 0 pulls into one range, write 1 (inline: the engine places its bytes when it
    delivers it, after write 0) into another, write 2 pulls into write 1's range. The
    stand-in agent answers requests two at a time (or one after 0.2 s): an engine that
    pulled write 2 ahead with write 0 would see its bytes land before write 1's, and
    write 1's would stay."""
    from gpuwrite.host.wqe import rdma_write, rdma_write_inline

    with Context(workers=1) as ctx:
        agent = PullAgent(ctx, pull_timeout_s=5.0, slots=4).start(launch=False)
        server, rounds = _stand_in_agent(agent, 4, expect=2, patience_s=0.2)
        src, dst, smr, dmr, poster, _keep = _one_qp(ctx, 128, 128)
        qpn = poster.q.qpns[0]
        poster.write(rdma_write(poster.pi, qpn, smr.address, smr.lkey, 64, dmr.address + 64,
                                dmr.rkey))
        poster.write(rdma_write_inline(poster.pi, qpn, bytes([0xAB]) * 64, dmr.address,
                                       dmr.rkey))         # two basic blocks
        poster.write(rdma_write(poster.pi, qpn, smr.address + 64, smr.lkey, 64, dmr.address,
                                dmr.rkey))
        cqes = _ring_and_finish(ctx, agent, server, poster, 3)
    assert len(cqes) == 3 and all(c.syndrome == 0 for c in cqes), cqes
    assert np.array_equal(dst[64:], src[:64])
    assert np.array_equal(dst[:64], src[64:]), "write 1's bytes stayed over write 2's"
    assert rounds[:2] == [1, 1], rounds      # write 2 was posted once write 1 was placed


def test_no_pull_lands_for_a_write_flushed_behind_a_failed_one():
    """Write 0 names a remote key that does not exist: its error completion puts the QP in
    error, so write 1 (a pull) is flushed, and a NIC places none of a flushed write's
    bytes. The engine does not post write 1's pull behind write 0."""
    from gpuwrite.host.wqe import rdma_write

    with Context(workers=1) as ctx:
        agent = PullAgent(ctx, pull_timeout_s=5.0, slots=4).start(launch=False)
        server, rounds = _stand_in_agent(agent, 4)
        src, dst, smr, dmr, poster, _keep = _one_qp(ctx, 64, 64)
        qpn = poster.q.qpns[0]
        poster.write(rdma_write(0, qpn, smr.address, smr.lkey, 64, dmr.address,
                                dmr.rkey ^ 0x5A5A00))
        poster.write(rdma_write(1, qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey))
        cqes = _ring_and_finish(ctx, agent, server, poster, 2)
    assert [L.reason_name(c.reason) for c in cqes] == ["bad_rkey", "flushed"], cqes
    assert not dst.any(), "a flushed write's bytes landed"
    assert rounds == [1], rounds             # the stop request alone


@gpu
def test_a_later_write_at_the_agent_lands_after_an_earlier_one_on_the_copy_engine():
    """The other order, on a GPU: the earlier write's source is not 4-byte aligned, so its
    pull (8 MiB) goes to the copy engine, whose last bytes land a few hundred microseconds
    after the driver call; the later write (64 B, aligned: the agent's) covers those last
    bytes. An engine that posted the agent's pull before waiting for the copy engine's
    would let the earlier write land last."""
    from gwtest import ACCESS_RW
    from gpuwrite.host.wqe import HostPoster, rdma_write

    n = 8 << 20
    earlier = (np.arange(n + 1) % 251).astype(np.uint8)
    later = np.full(64, 0xEE, dtype=np.uint8)
    with cuda.defer_cleanup(), Context(workers=1) as ctx:
        # Device memory is allocated before the agent runs, and freed after it has
        # stopped (a cuMemFree waits for every running kernel).
        d_earlier, d_later = cuda.to_device(earlier), cuda.to_device(later)
        dst = mapped(n, np.uint8).host       # the agent writes only where the GPU can
        pd = ctx.alloc_pd()
        emr = pd.reg_mr(d_earlier, access=L.ACCESS_LOCAL_WRITE)
        lmr = pd.reg_mr(d_later, access=L.ACCESS_LOCAL_WRITE)
        dmr = pd.reg_mr(dst, access=ACCESS_RW)
        assert emr.kind == lmr.kind == L.MEM_DEVICE and dmr.gpu_mapped
        qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
        poster = HostPoster(qs)
        poster.write(rdma_write(0, qs.qpns[0], emr.address + 1, emr.lkey, n, dmr.address,
                                dmr.rkey))
        poster.write(rdma_write(1, qs.qpns[0], lmr.address, lmr.lkey, 64,
                                dmr.address + n - 64, dmr.rkey))
        agent = PullAgent(ctx, pull_timeout_s=5.0).start()
        try:
            poster.ring()
            ctx.start()
            cqes = []
            deadline = time.monotonic() + 10
            while len(cqes) < 2 and time.monotonic() < deadline:
                cqe = poster.poll()
                if cqe is not None:
                    cqes.append(cqe)
        finally:
            report = agent.stop()
    assert len(cqes) == 2 and all(c.syndrome == 0 for c in cqes), cqes
    assert report["engine_answered"] == 1, report      # the later write's pull alone
    assert np.array_equal(dst[n - 64:], later)
    assert np.array_equal(dst[:n - 64], earlier[1:n - 63])


@gpu
def test_a_pull_into_memory_the_gpu_cannot_store_into_goes_to_the_copy_engine():
    """A destination of plain (pageable, unregistered) host memory: a GPU without access
    to pageable memory has no mapping for it, and the agent's store there would fault and
    end the CUDA context. The engine pulls into it with the copy engine instead, the
    agent running; into mapped memory beside it the agent still pulls."""
    from gwtest import ACCESS_RW
    from gpuwrite.host.memory import gpu_reaches
    from gpuwrite.host.wqe import HostPoster, rdma_write

    data = (np.arange(4096) % 251 + 1).astype(np.uint8)
    with cuda.defer_cleanup(), Context(workers=1) as ctx:
        d_src = cuda.to_device(data)
        plain = np.zeros(4096, dtype=np.uint8)
        mapped_dst = mapped(4096, np.uint8).host
        pd = ctx.alloc_pd()
        smr = pd.reg_mr(d_src, access=L.ACCESS_LOCAL_WRITE)
        pmr = pd.reg_mr(plain, access=ACCESS_RW)
        mmr = pd.reg_mr(mapped_dst, access=ACCESS_RW)
        pageable = gpu_reaches(plain.ctypes.data, plain.nbytes)
        assert pmr.gpu_mapped == pageable and mmr.gpu_mapped
        qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
        poster = HostPoster(qs)
        for k, mr in enumerate([pmr, mmr, pmr]):
            poster.write(rdma_write(k, qs.qpns[0], smr.address + 1024 * k, smr.lkey, 1024,
                                    mr.address + 1024 * k, mr.rkey))
        agent = PullAgent(ctx, pull_timeout_s=5.0).start()
        try:
            poster.ring()
            cqes = _completions(ctx, poster, 3)
        finally:
            report = agent.stop()
    assert len(cqes) == 3 and all(c.syndrome == 0 for c in cqes), cqes
    assert report["exit"] == "stopped" and report["engine_failed"] == 0, report
    assert report["engine_answered"] == (3 if pageable else 1), report
    assert np.array_equal(plain[:1024], data[:1024])
    assert np.array_equal(mapped_dst[1024:2048], data[1024:2048])
    assert np.array_equal(plain[2048:3072], data[2048:3072])


def test_a_pull_into_a_region_the_gpu_cannot_reach_is_not_sent_to_the_agent(monkeypatch):
    """The engine sends the agent no pull into a region registered as one the GPU cannot
    store into (here every host region, as plain numpy memory on a GPU without access to
    pageable memory): the stand-in agent sees the stop request alone, and the copy
    engine's stand-in delivers the bytes."""
    from gpuwrite.host import verbs as hv

    if not SIMULATOR:
        pytest.skip("the copy engine's stand-in copies with memmove: the sources must be "
                    "host memory")
    from gwtest import ACCESS_RW
    from gpuwrite.host.wqe import HostPoster, rdma_write

    with Context(workers=1) as ctx:
        agent = PullAgent(ctx, pull_timeout_s=5.0, slots=4).start(launch=False)
        server, rounds = _stand_in_agent(agent, 4)
        pd = ctx.alloc_pd()
        src = np.arange(128, dtype=np.uint8) + 1
        dst = np.zeros(128, dtype=np.uint8)
        smr = pd.reg_mr(src, access=L.ACCESS_LOCAL_WRITE, kind=L.MEM_DEVICE)
        monkeypatch.setattr(hv, "gpu_reaches", lambda address, nbytes: False)
        dmr = pd.reg_mr(dst, access=ACCESS_RW)
        assert not dmr.gpu_mapped
        qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
        poster = HostPoster(qs)
        for k in range(2):
            poster.write(rdma_write(k, qs.qpns[0], smr.address + 64 * k, smr.lkey, 64,
                                    dmr.address + 64 * k, dmr.rkey))
        cqes = _ring_and_finish(ctx, agent, server, poster, 2)
    assert len(cqes) == 2 and all(c.syndrome == 0 for c in cqes), cqes
    assert np.array_equal(dst, src)
    assert rounds == [1], rounds             # the stop request alone


def test_gpu_memory_the_gpu_does_not_map_is_refused(monkeypatch):
    """A region registered as GPU memory (kind=device) at addresses the GPU has no mapping
    for (host memory said to be GPU memory): the pull agent's load there would fault and
    end the CUDA context, so the registration is refused, naming what to register
    instead, and takes no key. On the simulator the driver's answer is stood in for."""
    from gpuwrite.host import verbs as hv
    from gpuwrite.host.memory import gpu_reaches

    buf = np.zeros(64, dtype=np.uint8)
    if SIMULATOR:
        monkeypatch.setattr(hv, "gpu_reaches", lambda address, nbytes: False)
    elif gpu_reaches(buf.ctypes.data, buf.nbytes):
        pytest.skip("this GPU reaches pageable host memory: nothing to refuse")
    with Context() as ctx:
        pd = ctx.alloc_pd()
        free = ctx._key_indices.free()
        with pytest.raises(ValueError, match=r"kind=device \(1\) for \[0x[0-9a-f]+, \+64\), "
                                             r"which the GPU does not map"):
            pd.reg_mr(buf, kind=L.MEM_DEVICE)
        assert ctx._key_indices.free() == free and pd.mrs == []
        assert pd.reg_mr(buf).kind == L.MEM_HOST


def test_the_simulator_agent_reaches_every_host_buffer():
    """Under the simulator the "GPU" is the host: every host region is one the (stand-in)
    agent writes into; device and staging regions are not host destinations at all."""
    if not SIMULATOR:
        pytest.skip("on a GPU it depends on the memory (the test above)")
    with Context() as ctx:
        pd = ctx.alloc_pd()
        assert pd.reg_mr(np.zeros(64, np.uint8)).gpu_mapped
        assert pd.reg_mr(mapped(64, np.uint8)).gpu_mapped
        assert not pd.reg_mr(np.zeros(64, np.uint8), kind=L.MEM_DEVICE).gpu_mapped


def test_late_pull_keeps_its_destination_until_the_agent_answers():
    from gpuwrite.host import verbs as hv

    with Context() as ctx:
        agent = PullAgent(ctx, pull_timeout_s=PULL_TIMEOUT_S, slots=4).start(launch=False)
        src, dst, dmr, cqe, _keep = _late_pull(ctx, agent)
        assert cqe is not None and L.reason_name(cqe.reason) == "pull_failed", cqe
        assert lib.gw_engine_late_pulls(ctx._engine, 0, 0) == 1
        assert lib.gw_engine_late_pulls(ctx._engine, dst.ctypes.data + 63, 1) == 1
        assert lib.gw_engine_late_pulls(ctx._engine, dst.ctypes.data + 64, 64) == 0
        kept = len(hv._LATE_PINS)
        with pytest.warns(RuntimeWarning, match="pull agent has not answered"):
            dmr.deregister()             # waits one more timeout, then keeps the memory
        assert len(hv._LATE_PINS) == kept + 1 and hv._LATE_PINS[-1] is dst
        # The agent answers after all: nothing is late any more, and the bytes it wrote
        # went into memory that was never freed.
        _answer_late(agent, src, dst)
        assert lib.gw_engine_late_pulls(ctx._engine, 0, 0) == 0
        agent.stop()


def test_late_pull_answered_before_deregistration_lets_the_region_go():
    import warnings
    from gpuwrite.host import verbs as hv

    with Context() as ctx:
        agent = PullAgent(ctx, pull_timeout_s=PULL_TIMEOUT_S, slots=4).start(launch=False)
        src, dst, dmr, cqe, _keep = _late_pull(ctx, agent)
        _answer_late(agent, src, dst)
        kept = len(hv._LATE_PINS)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dmr.deregister()
        assert len(hv._LATE_PINS) == kept
        agent.stop()


def test_context_closed_with_a_late_pull_keeps_every_buffer_it_pinned():
    from gpuwrite.host import verbs as hv

    ctx = Context()
    agent = PullAgent(ctx, pull_timeout_s=PULL_TIMEOUT_S, slots=4).start(launch=False)
    src, dst, dmr, cqe, _keep = _late_pull(ctx, agent)
    kept = len(hv._LATE_PINS)
    with pytest.warns(RuntimeWarning, match="context closed with 1 unanswered"):
        ctx.close()                      # the agent was never detached: it may still write
    assert any(b is dst for b in hv._LATE_PINS[kept:])
    assert any(b is src for b in hv._LATE_PINS[kept:])


def test_agent_dropped_while_attached_stays_until_the_engine_lets_go():
    """The engine reads and writes the agent's ring: dropping the last reference to an
    attached agent must not free it; closing the context lets it go."""
    import gc
    import weakref

    ctx = Context()
    agent = PullAgent(ctx, pull_timeout_s=0.05, slots=4).start(launch=False)
    ring = weakref.ref(agent.ring)
    del agent
    gc.collect()
    assert ring() is not None, "the ring of an attached agent was freed"
    ctx.close()
    gc.collect()
    assert ring() is None, "the ring outlived its engine"


def test_detached_agent_is_no_longer_held():
    import gc
    import weakref

    with Context() as ctx:
        agent = PullAgent(ctx, pull_timeout_s=0.05, slots=4).start(launch=False)
        ring = weakref.ref(agent.ring)
        agent.stop()
        del agent
        gc.collect()
        assert ring() is None, "the engine still holds a detached agent"


@gpu
def test_context_closed_under_a_running_agent_keeps_its_ring():

    ctx = Context()
    agent = PullAgent(ctx, idle_timeout_s=2.0).start()
    kept = len(pa._KEPT)
    ctx.close()                          # no stop(): the kernel polls its ring for 2 s more
    assert len(pa._KEPT) == kept + 1 and pa._KEPT[-1] is agent
    agent._stream.synchronize()


def test_the_agents_with_block_holds_numbas_frees_until_it_has_stopped(monkeypatch):
    """A free waits for every kernel of the context, the persistent agent too: inside
    ``with PullAgent(...)`` Numba's frees are deferred, from before the launch until after
    the stop, also when the block raises, and the stop's report is kept."""
    events = []

    class Held:
        def __enter__(self):
            events.append("frees held")

        def __exit__(self, *exc):
            events.append("frees let go")

    monkeypatch.setattr(pa.cuda, "defer_cleanup", Held)
    monkeypatch.setattr(PullAgent, "start", lambda self, launch=True: events.append("start") or self)

    def stop(self):
        events.append("stop")
        self.report = {"exit": "stopped"}
        return self.report

    monkeypatch.setattr(PullAgent, "stop", stop)
    with Context() as ctx:
        with PullAgent(ctx) as agent:
            events.append("body")
        assert events == ["frees held", "start", "body", "stop", "frees let go"]
        assert agent.report == {"exit": "stopped"}
        events.clear()
        with pytest.raises(KeyError):
            with PullAgent(ctx):
                raise KeyError("the sender failed")
        assert events == ["frees held", "start", "stop", "frees let go"]
        events.clear()
        monkeypatch.setattr(PullAgent, "start", lambda self, launch=True: (_ for _ in ()).throw(
            RuntimeError("no stream")))
        with pytest.raises(RuntimeError, match="no stream"):
            with PullAgent(ctx):
                events.append("body")
        assert events == ["frees held", "frees let go"]


@gpu
def test_a_free_inside_the_agents_with_block_does_not_wait_for_the_agent():
    """Inside the with block Numba's frees wait: a forced flush of its pending frees returns
    at once, whatever a free would wait for beside the running agent."""
    import gc

    with Context() as ctx:
        with PullAgent(ctx, idle_timeout_s=5.0):
            garbage = cuda.to_device(np.zeros(1 << 16, dtype=np.uint8))
            del garbage
            gc.collect()
            t0 = time.monotonic()
            cuda.current_context().deallocations.clear()
            waited = time.monotonic() - t0
        assert waited < 1.0, f"a free waited {waited:.1f} s for the running agent"


# -- the agent kernel alone, fed by the test: batches in ticket order ----------------------
# It runs on the simulator too (the sender is not beside it), so CI checks its batching.

def _feed(ring, slots, t, nbytes, src, dst, lap=None):
    """Writes request ``t`` into its slot as the engine does (struct gw_pull_req)."""
    lap = (t // slots + 1) & 0xFFFF if lap is None else lap
    ring.host[t % slots] = [(t + 1) << 32 | nbytes, lap << 48 | src, lap << 48 | dst, 0]


def _run_agent(ring, done, idle_s=0.05, blocks=1, split_bytes=1 << 40, min_chunk=16,
               threads=32):
    from gpuwrite.cudaenv import cuda

    outcome = cuda.to_device(np.zeros(4, dtype=np.int64))
    ctl = cuda.to_device(np.zeros(4, dtype=np.int64))
    desc = cuda.to_device(np.zeros((pa.AGENT_BATCH + 1, 4), dtype=np.int64))
    pa._agent[blocks, threads](ring.kernel, done.kernel, int(idle_s * 1e9), split_bytes, min_chunk,
                          ctl, desc, outcome)
    cuda.synchronize()
    out = outcome.copy_to_host()
    return pa.EXIT_NAMES[int(out[pa.A_EXIT])], int(out[pa.A_PULLS]), int(out[pa.A_BYTES])


def _buffers(sizes):
    from gpuwrite.host.memory import mapped

    src = mapped((4096,), np.uint32)
    src.host[:] = np.arange(1, 4097, dtype=np.uint32)
    dst = mapped((4096,), np.uint32)
    dst.host[:] = 0xDEADBEEF
    offsets = np.cumsum([0] + [-(-n // 16) * 16 for n in sizes])     # 16-byte apart
    return src, dst, offsets


def test_agent_answers_whole_requests_in_ticket_order_and_stops_at_the_stop():
    from gpuwrite.host.memory import mapped

    slots = 16
    sizes = [4, 7, 64, 100, 300, 1, 16, 48, 256, 12, 200]    # 11: a full batch, then 3
    ring, done = mapped((slots, 4), np.uint64), mapped((slots,), np.uint32)
    src, dst, off = _buffers(sizes + [64])
    for t, n in enumerate(sizes):
        _feed(ring, slots, t, n, src.address + int(off[t]), dst.address + int(off[t]))
    stop = len(sizes)
    _feed(ring, slots, stop, pa.STOP_BYTES, 0, 0)
    # A whole request after the stop, inside the same poll's window: never answered.
    _feed(ring, slots, stop + 1, 64, src.address + int(off[stop]), dst.address + int(off[stop]))
    exit_, pulls, nbytes = _run_agent(ring, done)
    assert (exit_, pulls, nbytes) == ("stopped", len(sizes), sum(sizes))
    assert list(done.host[:stop + 1]) == list(range(1, stop + 2))
    assert not done.host[stop + 1:].any()
    _check_copies(dst, src, off, sizes)
    got, canary = dst.host.view(np.uint8), np.full(4096, 0xDEADBEEF, np.uint32).view(np.uint8)
    a = int(off[stop])
    assert np.array_equal(got[a:], canary[a:])                       # after the stop


@pytest.mark.parametrize("sizes", [
    [4, 7, 64, 100, 3000, 1, pa.WARP_COPY_BYTES, 48],            # a request to a warp
    [64, pa.WARP_COPY_BYTES + 4, 100, 5, 4096, 9, 33, 1000],     # one too large: the block
    [pa.WARP_COPY_BYTES - 12, 4097, 3],                           # three warps
    [pa.WARP_COPY_BYTES],                                         # one: the whole block
], ids=["small", "mixed", "three", "one"])
def test_a_batch_is_copied_a_request_to_a_warp_or_by_the_whole_block(sizes):
    """Where a batch has two or more requests, each at most WARP_COPY_BYTES, the warps copy
    one each side by side (on a GPU four warps: eight requests in two rounds), else the
    whole block copies them one after another; either way every byte lands, not a byte
    more, in order. (The simulator's warp barrier is the block's: there the agent runs one
    warp.)"""
    from gpuwrite.host.memory import mapped

    slots = 16
    words = 16384
    src = mapped((words,), np.uint32)
    src.host[:] = np.arange(1, words + 1, dtype=np.uint32)
    dst = mapped((words,), np.uint32)
    dst.host[:] = 0xDEADBEEF
    off = np.cumsum([0] + [-(-n // 16) * 16 + 16 for n in sizes])
    ring, done = mapped((slots, 4), np.uint64), mapped((slots,), np.uint32)
    for t, n in enumerate(sizes):
        _feed(ring, slots, t, n, src.address + int(off[t]), dst.address + int(off[t]))
    _feed(ring, slots, len(sizes), pa.STOP_BYTES, 0, 0)
    exit_, pulls, nbytes = _run_agent(ring, done, threads=32 if SIMULATOR else 128)
    assert (exit_, pulls, nbytes) == ("stopped", len(sizes), sum(sizes))
    got, want = dst.host.view(np.uint8), src.host.view(np.uint8)
    canary = np.full(words, 0xDEADBEEF, dtype=np.uint32).view(np.uint8)
    for t, n in enumerate(sizes):
        a, b = int(off[t]), int(off[t + 1])
        assert np.array_equal(got[a:a + n], want[a:a + n]), t
        assert np.array_equal(got[a + n:b], canary[a + n:b]), t


def _check_copies(dst, src, off, sizes):
    got, want = dst.host.view(np.uint8), src.host.view(np.uint8)
    canary = np.full(4096, 0xDEADBEEF, dtype=np.uint32).view(np.uint8)
    for t, n in enumerate(sizes):
        a, b = int(off[t]), int(off[t + 1])
        assert np.array_equal(got[a:a + n], want[a:a + n]), t
        assert np.array_equal(got[a + n:b], canary[a + n:b]), t     # not a byte more


def test_agent_split_batches_deliver_every_chunk_and_answer_in_order():
    """Batches of at least split_bytes are cut into chunks (here of 224 B: 3501 bytes
    over 8 blocks, two chunks each) that the blocks claim. The simulator runs the blocks
    one after another, so the leader claims every chunk itself, as it does on a GPU for
    chunks no helper took; the helpers then find the leader gone and leave."""
    from gpuwrite.host.memory import mapped

    slots = 16
    sizes = [100, 4, 1000, 333, 64, 2000]       # 1, 1, 5, 2, 1 and 9 chunks
    ring, done = mapped((slots, 4), np.uint64), mapped((slots,), np.uint32)
    src, dst, off = _buffers(sizes)
    for t, n in enumerate(sizes):
        _feed(ring, slots, t, n, src.address + int(off[t]), dst.address + int(off[t]))
    _feed(ring, slots, len(sizes), pa.STOP_BYTES, 0, 0)
    exit_, pulls, nbytes = _run_agent(ring, done, blocks=8, split_bytes=64)
    assert (exit_, pulls, nbytes) == ("stopped", len(sizes), sum(sizes))
    assert list(done.host[:len(sizes) + 1]) == list(range(1, len(sizes) + 2))
    _check_copies(dst, src, off, sizes)


@pytest.mark.parametrize("blocks,split_bytes", [(1, 1 << 40), (8, 64)], ids=["one-block", "split"])
def test_overlapping_pulls_of_a_batch_land_in_ticket_order(blocks, split_bytes):
    """Pulls of one batch whose destinations overlap (a QP's writes to one range) land in
    ticket order, the later over the earlier, at any word offset: never side by side a
    warp each, nor split among blocks, where threads storing the same bytes in no order
    would let an earlier pull's bytes win (a GPU's four warps, or eight blocks, fail that;
    the simulator runs one warp and its blocks one after another)."""
    from gpuwrite.host.memory import mapped

    slots = 16
    # (source byte, destination byte, bytes): each later one over part of the ones before
    reqs = [(0, 0, 4000), (4096, 20, 100), (8192, 996, 64), (12288, 500, 3000), (16384, 3996, 61),
            (20480, 8, 7)]
    src = mapped((8192,), np.uint32)
    src.host[:] = np.arange(1, 8193, dtype=np.uint32) * 2654435761
    dst = mapped((2048,), np.uint32)
    dst.host[:] = 0xDEADBEEF
    ring, done = mapped((slots, 4), np.uint64), mapped((slots,), np.uint32)
    want = dst.host.view(np.uint8).copy()
    for t, (s_at, d_at, n) in enumerate(reqs):
        _feed(ring, slots, t, n, src.address + s_at, dst.address + d_at)
        want[d_at:d_at + n] = src.host.view(np.uint8)[s_at:s_at + n]
    _feed(ring, slots, len(reqs), pa.STOP_BYTES, 0, 0)
    exit_, pulls, nbytes = _run_agent(ring, done, blocks=blocks, split_bytes=split_bytes,
                                      threads=32 if SIMULATOR else 128)
    assert (exit_, pulls, nbytes) == ("stopped", len(reqs), sum(n for _, _, n in reqs))
    assert np.array_equal(dst.host.view(np.uint8), want)


def _published_batch():
    """A split batch's rows as the leader publishes them: two requests of 40 and 72 bytes in
    chunks of 32 B (2 and 3 chunks): (sizes, src, dst, offsets, rows)."""
    sizes = [40, 72]                 # chunks of 32 B: 2 and 3
    src, dst, off = _buffers(sizes)
    rows = np.zeros((pa.AGENT_BATCH + 1, 4), dtype=np.int64)
    rows[0] = [40, src.address + int(off[0]), dst.address + int(off[0]), 0]
    rows[1] = [72, src.address + int(off[1]), dst.address + int(off[1]), 2]
    rows[2, pa.D_FIRST] = 5
    rows[pa.AGENT_BATCH, pa.D_BYTES] = 32
    return sizes, src, dst, off, rows


_S_WORDS = pa.S_WORDS      # a global int: numba takes it as a constant, a module attribute not


@cuda.jit
def _claim(desc, ctl, seq, copied):
    """One block claims and copies the chunks of split batch ``seq`` (pull_agent)."""
    shc = cuda.shared.array(_S_WORDS, dtype=np.int64)
    n = pa._copy_chunks(desc, ctl, seq, shc)
    if cuda.threadIdx.x == 0:
        copied[0] = n


def test_chunks_of_another_batch_are_never_claimed():
    """A block late for split batch 4 finds CLAIM naming batch 5: it claims nothing (a
    chunk it took would be copied by the wrong rows, and batch 5 would wait for it
    forever). Batch 5's own claims take every chunk, last first, and copy it."""
    sizes, src, dst, off, rows = _published_batch()
    desc = cuda.to_device(rows)

    ctl = cuda.to_device(np.array([5 << 32 | 5, 0, 0, 0], dtype=np.int64))
    copied = cuda.to_device(np.zeros(1, dtype=np.int64))
    _claim[1, 32](desc, ctl, 4, copied)
    assert copied.copy_to_host()[0] == 0 and ctl.copy_to_host()[pa.C_CLAIM] == 5 << 32 | 5
    assert (dst.host == 0xDEADBEEF).all()
    _claim[1, 32](desc, ctl, 5, copied)
    assert copied.copy_to_host()[0] == 5 and ctl.copy_to_host()[pa.C_CLAIM] == 5 << 32
    _check_copies(dst, src, off, sizes)


@cuda.jit
def _help(ctl, desc, idle_timeout_ns, outcome):
    """A helper block alone (pull_agent._helper), fed a published split batch."""
    shc = cuda.shared.array(_S_WORDS, dtype=np.int64)
    pa._helper(ctl, desc, idle_timeout_ns, outcome, shc)


def test_a_helper_copies_a_published_batch_counts_it_and_leaves_when_the_leader_stops():
    """Batch 3 is published with its 5 chunks unclaimed and no leader polls (its beat never
    moves): the helper claims and copies every chunk, counts them where the leader waits
    (FINISHED) and in the outcome, then leaves after the idle timeout without a beat."""
    sizes, src, dst, off, rows = _published_batch()
    ctl = cuda.to_device(np.array([3 << 32 | 5, 7, 0, 12345], dtype=np.int64))
    outcome = cuda.to_device(np.zeros(4, dtype=np.int64))
    started = time.monotonic()
    _help[1, 32](ctl, cuda.to_device(rows), int(0.05e9), outcome)
    cuda.synchronize()
    assert time.monotonic() - started >= 0.05           # it waited for a beat first
    c = ctl.copy_to_host()
    assert c[pa.C_CLAIM] == 3 << 32 and c[pa.C_FINISHED] == 7 + 5
    assert outcome.copy_to_host()[pa.A_HELPED] == 5
    _check_copies(dst, src, off, sizes)


def test_a_helper_leaves_with_the_leader_without_waiting_for_the_idle_timeout():
    ctl = cuda.to_device(np.array([3 << 32, 0, 1, 0], dtype=np.int64))     # EXIT set
    outcome = cuda.to_device(np.zeros(4, dtype=np.int64))
    started = time.monotonic()
    _help[1, 32](ctl, cuda.to_device(np.zeros((pa.AGENT_BATCH + 1, 4), dtype=np.int64)),
                 int(30e9), outcome)
    cuda.synchronize()
    assert time.monotonic() - started < 10
    assert ctl.copy_to_host()[pa.C_FINISHED] == 0 and outcome.copy_to_host()[pa.A_HELPED] == 0


def test_agent_takes_no_request_past_one_not_yet_whole():
    """Ticket 2's source word still carries another lap (the engine has not written it
    yet): the agent answers 0 and 1 only, although 3 and 4 are whole, then leaves idle."""
    from gpuwrite.host.memory import mapped

    slots = 8
    sizes = [64] * 5
    ring, done = mapped((slots, 4), np.uint64), mapped((slots,), np.uint32)
    src, dst, off = _buffers(sizes)
    for t, n in enumerate(sizes):
        _feed(ring, slots, t, n, src.address + int(off[t]), dst.address + int(off[t]),
              lap=2 if t == 2 else None)
    exit_, pulls, nbytes = _run_agent(ring, done)
    assert (exit_, pulls, nbytes) == ("left after its idle timeout", 2, 128)
    assert list(done.host[:5]) == [1, 2, 0, 0, 0]
    assert (dst.host[int(off[2]) // 4:] == 0xDEADBEEF).all()
    assert np.array_equal(dst.host[:int(off[2]) // 4], src.host[:int(off[2]) // 4])


def test_detach_while_a_worker_waits_to_post_lets_it_finish_into_the_old_ring():
    """A worker posting its second pull waits for the one slot's first ticket; the owner
    detaches the agent meanwhile (the ring pointer goes NULL, the detach waits for the
    worker's pass). When the first ticket is answered the worker must finish its post
    into the ring it started with, still alive, not into NULL."""
    import threading
    from gpuwrite._gw_cffi import ffi

    with Context() as ctx:
        agent = PullAgent(ctx, pull_timeout_s=1.0, slots=1).start(launch=False)
        src, dst, _dmr, poster, _keep = _device_writes(ctx, 2)
        ctx.start()
        poster.ring()
        deadline = time.monotonic() + 5
        while agent.ring.host[0, 0] >> 32 != 1:      # ticket 0 posted; ticket 1 waits for it
            assert time.monotonic() < deadline, "the engine never posted its first pull"
            time.sleep(0.001)
        detached = []
        detach = threading.Thread(target=lambda: detached.append(
            lib.gw_engine_set_pull_agent(ctx._engine, ffi.NULL, ffi.NULL, 0, 0)))
        detach.start()
        time.sleep(0.05)                              # the ring pointer is NULL now
        dst[:64] = src[:64]                           # play the agent for ticket 0
        agent.done.host[0] = 1
        detach.join(10)
        assert detached == [0]
        assert agent.ring.host[0, 0] >> 32 == 2       # ticket 1 went into the old ring
        cqes = []
        while len(cqes) < 2 and time.monotonic() < deadline:
            c = poster.poll()
            if c is not None:
                cqes.append(c)
        assert [L.reason_name(c.reason) if c.syndrome else "ok" for c in cqes] == \
            ["ok", "pull_failed"], cqes
        assert np.array_equal(dst[:64], src[:64]) and not dst[64:].any()
        ctx._eng.pins.pop(("pull_agent",), None)


@pytest.mark.parametrize("threads", [0, 16, 1024, pa.MAX_THREADS + 32])
def test_agent_refuses_a_block_that_would_not_launch(threads):
    """A block of more than 512 threads does not launch at the agent's 128 registers a
    thread (and one of 16 has no whole warp): a clear error naming the value, before any
    launch."""
    with Context() as ctx:
        with pytest.raises(ValueError, match=f"threads={threads}: a multiple of 32 from 32 to "
                                             f"{pa.MAX_THREADS}"):
            PullAgent(ctx, threads=threads)
