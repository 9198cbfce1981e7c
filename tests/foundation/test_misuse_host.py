"""The host verbs under misuse a user may commit: each is refused with an error that names
the value and what is allowed, or kept as a NIC keeps it; none writes where it must not,
crashes the process or leaks (session 49's audit found each of these broken)."""
import gc
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

from childenv import child_env
from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.host import memory
from gpuwrite.host.verbs import Context, LinkConfig, VerbsError
from gpuwrite.host.wqe import HostPoster, rdma_write

RW = L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE


def _write(ctx, poster, smr, dmr, nbytes):
    poster.write(rdma_write(poster.pi, poster.qpn, smr.address, smr.lkey, nbytes, dmr.address,
                            dmr.rkey))
    poster.ring()
    for _ in range(200):
        ctx.poll(4)
        got = poster.poll()
        if got is not None:
            return got
    raise AssertionError("no completion")


# -- the engine's life ------------------------------------------------------------------

@pytest.mark.parametrize("call", ["ctx.counters()", "ctx.poll(1)",
                                  "pd.reg_mr(np.zeros(64, np.uint8)).deregister()"])
def test_closing_a_context_another_thread_is_using_raises_there_not_a_crash(call):
    """cffi lets go of the GIL in a call: a close() in one thread freed the engine under
    another thread's call (exit 139 within a few rounds)."""
    code = textwrap.dedent(f"""
        import threading
        import numpy as np
        from gpuwrite.host.verbs import Context, VerbsError
        for _ in range(200):
            ctx = Context(max_qps=64, max_mrs=64)
            pd = ctx.alloc_pd()
            pd.create_queues(1, sq_bbs=16, ncqe=16)
            seen = []
            def use():
                try:
                    while True:
                        {call}
                except VerbsError as exc:
                    seen.append(str(exc))
            t = threading.Thread(target=use)
            t.start()
            ctx.close()
            t.join(10)
            assert not t.is_alive() and "closed" in seen[0], seen
        print("ok")
        """)
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                         timeout=120, env=child_env())
    assert out.returncode == 0 and "ok" in out.stdout, (out.returncode, out.stderr[-2000:])


def test_closing_a_context_flushes_what_was_posted():
    """As a NIC whose queues are destroyed: a kernel waiting on them sees error
    completions, not a timeout; no byte lands (a context closed with three writes on a
    slow link completed none of them)."""
    src = np.full(65536, 7, np.uint8)
    dst = np.zeros(3 * 65536, np.uint8)
    ctx = Context(link=LinkConfig(rate_gbps=0.001, mtu_bytes=4096))
    pd = ctx.alloc_pd()
    smr, dmr = pd.reg_mr(src, access=0), pd.reg_mr(dst, access=RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p = HostPoster(qs)
    for k in range(3):
        p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 65536, dmr.address + k * 65536,
                           dmr.rkey))
    p.ring()
    ctx.poll(2)
    ctx.close()
    got = [p.poll() for _ in range(4)]
    assert [c.wqe_counter for c in got[:3]] == [0, 1, 2] and got[3] is None
    assert all(L.reason_name(c.reason) == "flushed" for c in got[:3]), [c.describe() for c in got[:3]]
    assert qs.qp_state(0) == "error"
    assert not dst[65536:].any()


def test_two_contexts_do_not_hand_out_the_same_keys():
    """Every context started its key variants from one fixed seed, so context B took
    context A's keys as its own."""
    firsts = set()
    for _ in range(8):
        with Context() as ctx:
            firsts.add(ctx.alloc_pd().reg_mr(np.zeros(64, np.uint8)).key)
    assert len(firsts) > 1, firsts       # all eight equal by chance: 256 ** -7


# -- protection domains -----------------------------------------------------------------

def test_a_qp_reads_only_regions_of_its_own_protection_domain():
    with Context() as ctx:
        mine, other = ctx.alloc_pd(), ctx.alloc_pd()
        src = np.full(64, 9, np.uint8)
        dst = np.zeros(64, np.uint8)
        theirs = other.reg_mr(src, access=0)
        dmr = mine.reg_mr(dst, access=RW)
        p = HostPoster(mine.create_queues(1, sq_bbs=16, ncqe=16))
        got = _write(ctx, p, theirs, dmr, 64)
        assert (L.reason_name(got.reason), got.syndrome) == ("bad_lkey", L.SYNDROME["local_prot_err"])
        assert not dst.any()
        p.q.reset(0)
        p.reset()
        got = _write(ctx, p, mine.reg_mr(src, access=0), dmr, 64)
        assert got.ok and (dst == 9).all()


def test_a_closed_domain_takes_no_region_or_queue():
    with Context() as ctx:
        pd = ctx.alloc_pd()
        pd.close()
        with pytest.raises(VerbsError, match="protection domain .* is closed"):
            pd.reg_mr(np.zeros(64, np.uint8))
        with pytest.raises(VerbsError, match="protection domain .* is closed"):
            pd.create_queues(1)


def test_a_deregistered_region_leaves_its_domain_and_its_buffer_goes():
    with Context() as ctx:
        pd = ctx.alloc_pd()
        for _ in range(3):
            buf = np.zeros(1 << 20, np.uint8)
            gone = weakref.ref(buf.base if buf.base is not None else buf)
            with pd.reg_mr(buf):
                pass
            del buf
            gc.collect()
            assert gone() is None, "the domain kept a deregistered region's buffer"
        assert pd.mrs == []


# -- buffers ----------------------------------------------------------------------------

def test_a_read_only_buffer_is_a_source_only():
    """A read-only array, a bytes object's buffer or a read-only memmap was registered
    with write access and written (the memmap's write ended the process)."""
    src = np.full(64, 3, np.uint8)
    src.flags.writeable = False
    with Context() as ctx:
        pd = ctx.alloc_pd()
        for ro in (src, np.frombuffer(bytes(64), np.uint8)):
            for access in (L.ACCESS_LOCAL_WRITE, RW):
                with pytest.raises(ValueError, match=f"access=0x{access:x} asks for write access "
                                   "to a read-only"):
                    pd.reg_mr(ro, access=access)
        dst = np.zeros(64, np.uint8)
        p = HostPoster(pd.create_queues(1, sq_bbs=16, ncqe=16))
        got = _write(ctx, p, pd.reg_mr(src, access=0), pd.reg_mr(dst, access=RW), 64)
        assert got.ok and (dst == 3).all(), "a read-only source is still read"


def test_remote_write_needs_local_write_as_ibverbs_says():
    with Context() as ctx:
        with pytest.raises(ValueError, match="ACCESS_REMOTE_WRITE needs ACCESS_LOCAL_WRITE"):
            ctx.alloc_pd().reg_mr(np.zeros(64, np.uint8), access=L.ACCESS_REMOTE_WRITE)


def test_an_array_of_python_objects_is_refused():
    """Its elements are pointers: a write through the NIC crashed the process."""
    with Context() as ctx:
        with pytest.raises(TypeError, match="dtype object holds Python objects"):
            ctx.alloc_pd().reg_mr(np.array([object()] * 8, dtype=object))


@pytest.mark.skipif(not SIMULATOR, reason="a simulated device array's host view")
@pytest.mark.parametrize("view", [lambda d: d[::-1], lambda d: d.reshape(8, 8)[:, 1],
                                  lambda d: d[::2]])
def test_a_strided_device_array_view_is_refused(view):
    """The simulator's device arrays skipped the contiguity check: a reversed view was
    registered from its last element on, 60 bytes past the allocation."""
    d = cuda.to_device(np.zeros(64, np.uint32))
    with Context() as ctx:
        with pytest.raises(ValueError, match="must be C-contiguous"):
            ctx.alloc_pd().reg_mr(view(d))


class _Interface:
    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


_ADDRESS = 0x7F00_0000_0000


@pytest.mark.parametrize("cai, error, match", [
    ({"typestr": "|u1", "data": (_ADDRESS, False), "version": 3}, TypeError, "malformed"),
    ({"shape": (16,), "typestr": "|u1", "data": None, "version": 3}, TypeError, "malformed"),
    ({"shape": (16.0,), "typestr": "|u1", "data": (_ADDRESS, False)}, TypeError, "malformed"),
    ({"shape": (-16,), "typestr": "|u1", "data": (_ADDRESS, False)}, ValueError, "extents must be >= 0"),
    ({"shape": (-4, -4), "typestr": "|u1", "data": (_ADDRESS, False)}, ValueError, "extents must be >= 0"),
    ({"shape": (2 ** 61,), "typestr": "<u8", "data": (_ADDRESS, False)}, ValueError,
     "past the end of the address space"),
    ({"shape": (16,), "typestr": "|u1", "data": (1 << 64, False)}, ValueError, "allowed 0 to 2"),
    ({"shape": (16,), "typestr": "|O", "data": (_ADDRESS, False)}, TypeError, "Python objects"),
    ({"shape": (16,), "typestr": "|u1", "data": (_ADDRESS, False), "mask": object()}, ValueError,
     "has a mask"),
])
def test_a_malformed_cuda_array_interface_is_refused_by_name(cai, error, match):
    with pytest.raises(error, match=match):
        memory.describe(_Interface(cai))


def test_a_read_only_cuda_array_interface_is_not_writeable():
    cai = {"shape": (16,), "typestr": "|u1", "data": (_ADDRESS, True), "version": 3}
    assert memory.describe(_Interface(cai)) == (_ADDRESS, 16, L.MEM_DEVICE, False)


# -- queues and configuration -------------------------------------------------------------

def test_numpy_integers_size_queues():
    with Context() as ctx:
        qs = ctx.alloc_pd().create_queues(np.int64(1), sq_bbs=np.int64(16), ncqe=np.uint32(16),
                                          stage_slot_bytes=np.int64(256))
        assert (qs.sq_bbs, qs.ncqe, qs.stage_slot_bytes) == (16, 16, 256)


@pytest.mark.parametrize("index", [1, -1, 2 ** 40, 1.0, "0"])
def test_a_qp_index_outside_the_set_is_refused_by_name(index):
    with Context() as ctx:
        qs = ctx.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16)
        for call in (qs.qp_state, qs.reset, lambda i: HostPoster(qs, i)):
            with pytest.raises(ValueError, match=r"qp=.*this set has 1 QP"):
                call(index)


def test_a_closed_queue_set_is_not_reset():
    """reset() on a closed set zeroed its GPU state before it failed."""
    with Context() as ctx:
        qs = ctx.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16)
        qs.close()
        with pytest.raises(VerbsError, match="this queue set is closed"):
            qs.reset(0)


@pytest.mark.parametrize("kwargs, match", [
    ({"mtu_bytes": 4096.0}, "mtu_bytes=4096.0"), ({"rate_gbps": "10"}, "rate_gbps='10'"),
    ({"drain_gbps": b"1"}, "drain_gbps=b'1'"),
])
def test_a_link_of_the_wrong_types_is_refused_when_built(kwargs, match):
    """These passed LinkConfig and failed inside cffi at Context(), naming nothing."""
    with pytest.raises(ValueError, match=match):
        LinkConfig(**kwargs)


def test_a_gpu_too_old_for_the_device_verbs_is_refused_by_name():
    """The verbs use cp.async (sm_80 on): on an older GPU the kernels failed inside the
    PTX compiler, long after the Context opened."""
    from types import SimpleNamespace

    from gpuwrite.cudaenv import check_capability
    with pytest.raises(RuntimeError, match=r"GPU Tesla T4 has compute capability 7\.5; .* 8\.0 or newer"):
        check_capability(SimpleNamespace(name=b"Tesla T4", compute_capability=(7, 5)))
    check_capability(SimpleNamespace(name="NVIDIA A100", compute_capability=(8, 0)))
    check_capability(SimpleNamespace(name="NVIDIA H200", compute_capability=(9, 0)))
