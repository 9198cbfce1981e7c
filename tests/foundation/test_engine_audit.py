"""Engine bugs found by the sanitizer audit (scripts/sanitize_check.sh, which also runs
adversary.py, the adversarial driver), one test each; each failed before its fix. All
drive the engine from the host in this thread (``Context.poll``): no kernel, exact
outcomes.
"""
import numpy as np
import pytest

import adversary
from gwtest import ACCESS_RW, canaried
from gpuwrite import layouts as L
from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.host.verbs import Context, LinkConfig
from gpuwrite.host.wqe import HostPoster, rdma_write
from test_gaps_engine import stage_push

pytestmark = pytest.mark.timeout(60)

# 16 credit blocks (1 KiB) at the receiver: a stalled one takes two 512-byte packets.
STALL_LINK = LinkConfig(rate_gbps=1.0, mtu_bytes=512, rx_credits=16, credit_latency_ns=2000)


def poll_until(ctx, p, count: int, passes: int = 20000) -> list:
    got = []
    for _ in range(passes):
        if len(got) >= count:
            break
        ctx.poll(1)
        while (c := p.poll()) is not None:
            got.append(c)
    return got


def test_a_key_registered_again_does_not_revive_a_wqe_aimed_at_the_old_region():
    """A 2 KiB write into a stalled receiver: 1 KiB lands, the rest waits. Its destination
    is deregistered, then its key index is registered 256 times more until the key comes
    back on new memory. Nothing may land in the old memory (the application may have
    freed it), nor in the new, and the WQE fails with rkey_invalidated."""
    with Context(link=STALL_LINK) as ctx:
        pd = ctx.alloc_pd()
        src = np.full(2048, 7, np.uint8)
        smr = pd.reg_mr(src)
        qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
        p = HostPoster(qs)
        old = np.zeros(2048, np.uint8)
        omr = pd.reg_mr(old, access=ACCESS_RW)
        ctx.stall_receiver(True)
        p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 2048, omr.address, omr.rkey))
        p.ring()
        assert poll_until(ctx, p, 1, passes=2000) == []
        assert (old[:1024] == 7).all() and (old[1024:] == 0).all()   # in flight
        key = omr.key
        omr.deregister()
        snap = old.copy()
        for _ in range(256):
            new = np.zeros(2048, np.uint8)
            nmr = pd.reg_mr(new, access=ACCESS_RW)
            if nmr.key == key:
                break
            nmr.deregister()
        assert nmr.key == key, "the key index did not come back with the same variant"
        ctx.stall_receiver(False)
        (c,) = poll_until(ctx, p, 1)
        assert np.array_equal(old, snap), "bytes landed in a deregistered region"
        assert (new == 0).all(), "bytes of an older registration landed in the new one"
        assert not c.ok and c.reason == L.REASON["rkey_invalidated"], c.describe()


def _push_into_a_stalled_receiver(ctx, pd, dst):
    """A 2 KiB push into ``dst`` with the receiver stalled: 1 KiB goes out on the stalled
    link's credits, 1 KiB stays held in the staging region. Returns (queues, poster)."""
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16, stage_slots=16, stage_slot_bytes=256)
    p = HostPoster(qs)
    ctx.stall_receiver(True)
    stage_push(qs, p, 0, 0, np.full(2048, 3, np.uint8), dmr.address, dmr.rkey)
    p.ring()
    return qs, p


def test_a_reset_counts_the_wqes_and_pushed_bytes_it_discards():
    """A 2 KiB push into a stalled receiver holds 1 KiB in the staging region; a QP reset
    discards the WQE (no completion, as a move to RESET): counted as flushed, its held
    bytes as dropped, and nothing stays held (it stayed "held" for ever, uncounted)."""
    with Context(link=STALL_LINK) as ctx:
        pd = ctx.alloc_pd()
        whole, dst, guard = canaried(4096)
        qs, p = _push_into_a_stalled_receiver(ctx, pd, dst)
        assert poll_until(ctx, p, 1, passes=2000) == []
        c = ctx.counters()
        assert (c["held_msgs"], c["held_bytes"], c["bytes_delivered"]) == (1, 1024, 1024)
        qs.reset(0)
        p.reset()
        ctx.stall_receiver(False)
        ctx.poll(100)
        c = ctx.counters()
        assert p.poll() is None
        assert (c["held_msgs"], c["held_bytes"]) == (0, 0)
        assert c["bytes_pushed"] == c["bytes_delivered"] + c["dropped_bytes"] == 2048
        assert (c["dropped_msgs"], c["flushed_wqes"]) == (1, 1)
        assert (dst[1024:] == 0xA5).all()
        assert (whole[:guard] == 0xA5).all() and (whole[guard + 4096:] == 0xA5).all()


def test_destroying_a_qp_with_held_bytes_keeps_the_held_high_water_mark():
    """The flush of a destroyed QP counts in a worker of its own, whose held bytes go
    below zero (they add up right); its high-water mark, that negative number as
    unsigned, was summed in too and lowered the engine's by what was flushed."""
    with Context(link=STALL_LINK) as ctx:
        pd = ctx.alloc_pd()
        dst = np.zeros(4096, np.uint8)
        qs, p = _push_into_a_stalled_receiver(ctx, pd, dst)
        poll_until(ctx, p, 1, passes=2000)
        before = ctx.counters()["held_bytes_max"]
        assert before == 2048                 # what was accepted when it arrived
        qs.close()
        c = ctx.counters()
    assert (c["held_msgs"], c["held_bytes"], c["dropped_bytes"]) == (0, 0, 1024)
    assert c["held_bytes_max"] == before


def test_destroying_a_qp_behind_a_full_cq_releases_what_it_held():
    """16 completions the GPU has not consumed fill the CQ; a push behind them holds
    1 KiB in a stalled receiver's staging region. Destroying the QP cannot complete the
    push (no CQ space): counted as flushed, and its held bytes as dropped, not held for
    ever."""
    with Context(link=STALL_LINK) as ctx:
        pd = ctx.alloc_pd()
        src = np.full(64, 1, np.uint8)
        dst = np.zeros(4096, np.uint8)
        smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
        qs = pd.create_queues(1, sq_bbs=16, ncqe=16, stage_slots=16, stage_slot_bytes=256)
        p = HostPoster(qs)
        for _ in range(16):
            p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 8, dmr.address, dmr.rkey))
        p.ring()
        ctx.poll(2000)                    # 16 completions, left in the CQ
        ctx.stall_receiver(True)
        stage_push(qs, p, 0, 0, np.full(2048, 3, np.uint8), dmr.address + 1024, dmr.rkey)
        p.ring()
        ctx.poll(2000)
        c = ctx.counters()
        assert (c["cqes"], c["held_msgs"], c["held_bytes"]) == (16, 1, 1024)
        qs.close()
        c = ctx.counters()
    assert (c["held_msgs"], c["held_bytes"]) == (0, 0)
    assert c["bytes_pushed"] == c["bytes_delivered"] - 16 * 8 + c["dropped_bytes"] == 2048
    assert c["flushed_wqes"] == 1


def test_a_ring_overflow_behind_a_full_cq_is_counted_once_and_lets_the_engine_idle(nic):
    """16 completions the GPU has not consumed fill the CQ; 16 more WQEs fill the
    descriptor ring behind it; 4 more overrun the send queue. The overflow is one event
    (it was counted in every pass, each pass busy), and once the CQ is consumed its error
    completion names the first lost WQE and covers the lost BBs (there was none: the QP
    went to error with no reason given, and its ring space never came back)."""
    pd = nic.alloc_pd()
    src = np.full(64, 1, np.uint8)
    dst = np.zeros(64, np.uint8)
    smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p = HostPoster(qs)

    def post(n):
        for _ in range(n):
            p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 8, dmr.address, dmr.rkey))
        p.ring()

    post(16)
    nic.poll(4)                       # 16 completions, left in the CQ
    post(16)
    nic.poll(4)                       # fetched; their completions wait for CQ space
    post(4)                           # 36 posted, 16 completed: the ring is overrun
    for _ in range(50):
        nic.poll(1)
    assert nic.counters()["ring_overflows"] == 1
    assert not nic.poll(1), "a QP that can make no progress kept the engine busy"
    assert qs.qp_state(0) == "error"
    got = poll_until(nic, p, 33)
    assert [c.ok for c in got] == [True] * 16 + [False] * 17, [c.describe() for c in got]
    assert all(c.reason == L.REASON["flushed"] for c in got[16:32])
    assert got[32].reason == L.REASON["ring_overflow"] and got[32].wqe_counter == 32
    nic.poll(50)
    assert p.poll() is None and nic.counters()["ring_overflows"] == 1
    # The overflow's descriptor covered the 4 lost BBs: the next WQE is taken as the
    # next one (flushed: the QP is in error), not as another overflow.
    post(1)
    (c,) = poll_until(nic, p, 1)
    assert c.reason == L.REASON["flushed"] and c.wqe_counter == 36, c.describe()
    assert nic.counters()["ring_overflows"] == 1


@pytest.mark.parametrize("cached_dst_max_bytes", [None, 0], ids=["cached", "streamed"])
@pytest.mark.parametrize("shift", [64, -64, 3])
def test_a_region_written_from_itself_gets_the_bytes_as_they_were(shift, cached_dst_max_bytes):
    """Source and destination of one WQE overlapping (a region written from itself,
    8 KiB moved by ``shift`` bytes): the engine read them with memcpy (undefined for
    overlapping ranges; ASan: memcpy-param-overlap) or a forward streaming loop that
    read back its own stores. A NIC reads before it writes. Both ways the engine stores
    8 KiB: through the cache (the region fits the default limit) and streamed by
    ``gw_copy`` (``cached_dst_max_bytes=0``)."""
    with Context(cached_dst_max_bytes=cached_dst_max_bytes) as nic:
        _region_from_itself(nic, shift)


def _region_from_itself(nic, shift):
    pd = nic.alloc_pd()
    whole, buf, guard = canaried(16384)
    buf[:] = (np.arange(16384) % 251).astype(np.uint8)
    mr = pd.reg_mr(buf, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p = HostPoster(qs)
    src_off = 4096
    want = buf.copy()
    want[src_off + shift:src_off + shift + 8192] = buf[src_off:src_off + 8192]
    p.write(rdma_write(p.pi, p.qpn, mr.address + src_off, mr.lkey, 8192,
                       mr.address + src_off + shift, mr.rkey))
    p.ring()
    (c,) = poll_until(nic, p, 1)
    assert c.ok, c.describe()
    assert np.array_equal(buf, want)
    assert (whole[:guard] == 0xA5).all() and (whole[guard + 16384:] == 0xA5).all()


def test_a_cq_its_24_bit_consumer_index_cannot_tell_full_is_refused():
    """The engine tells a full CQ by (producer - consumer) mod 2^24, the consumer index
    being 24 bits (mlx5's set_ci): a CQ of 2^24 entries or more never looked full, and
    completions overwrote ones the GPU had not read. The C layer accepted any power of
    two (the Python classes stop at 2^22, mlx5's limit, as the engine now does)."""
    err = ffi.new("char[]", 256)
    cfg = ffi.new("struct gw_engine_config *", {"workers": 1, "max_qps": 1, "max_cqs": 1,
                                                "max_mrs": 2})
    engine = lib.gw_engine_create(cfg, err, 256)
    assert engine != ffi.NULL
    ring = ffi.new("uint8_t[]", 64)           # never written: the CQ is refused or idle
    dbrec = ffi.new("uint8_t[]", 8)
    try:
        for ncqe, ok in ((1 << 24, False), (1 << 23, False), (1 << 22, True)):
            cq = ffi.new("struct gw_cq_desc *", {"cqn": 0, "ncqe": ncqe, "cqes": ring,
                                                  "dbrec": dbrec})
            rc = lib.gw_engine_add_cq(engine, cq, err, 256)
            assert (rc == 0) == ok, (ncqe, ffi.string(err).decode())
            if ok:
                assert lib.gw_engine_remove_cq(engine, 0) == 0
            else:
                assert f"ncqe={ncqe}" in ffi.string(err).decode()
    finally:
        lib.gw_engine_destroy(engine)


@pytest.mark.parametrize("config", [
    {},
    {"policy": L.POLICY_DROP, "limited_link": True},
    {"limited_link": True},
])
def test_adversarial_wqes_and_control_calls_keep_the_nic_promises(config):
    """A short run of adversary.py: random and malformed WQEs, staging headers, producer
    index jumps, deregistration (a key registered again included), QP reset and destroy,
    CQs left full. Every completion well formed and read, no byte beside a region,
    nothing held at the end (under the sanitizer: no access outside a ring or region)."""
    for seed in range(3):
        adversary.run(seed, 150, **config)


def test_a_second_queue_pair_on_a_cq_is_refused():
    """A destroyed QP's flush completions are written from the caller's thread; a worker
    serving another QP of the same CQ could write that CQ at the same time (a race the
    audit noted). The C layer accepted a second QP on a CQ (the Python classes give each
    its own): now refused by name, and the CQ takes a QP again once its QP is gone."""
    err = ffi.new("char[]", 256)
    cfg = ffi.new("struct gw_engine_config *", {"workers": 1, "max_qps": 2, "max_cqs": 1,
                                                "max_mrs": 2})
    engine = lib.gw_engine_create(cfg, err, 256)
    assert engine != ffi.NULL
    keep = []

    def qp_desc(qpn):
        bufs = (ffi.new("uint8_t[]", L.WQE_BB), ffi.new("uint8_t[]", 8), ffi.new("uint8_t[]", 64))
        keep.append(bufs)
        desc = ffi.new("struct gw_qp_desc *")
        desc.qpn, desc.cqn, desc.sq_bbs = qpn, 0, 1
        desc.sq, desc.dbrec, desc.status = bufs
        return desc

    ring, dbrec = ffi.new("uint8_t[]", 4 * L.CQE_SIZE), ffi.new("uint8_t[]", 8)
    try:
        cq = ffi.new("struct gw_cq_desc *", {"cqn": 0, "ncqe": 4, "cqes": ring, "dbrec": dbrec})
        assert lib.gw_engine_add_cq(engine, cq, err, 256) == 0
        assert lib.gw_engine_add_qp(engine, qp_desc(1), err, 256) == 0
        assert lib.gw_engine_add_qp(engine, qp_desc(2), err, 256) != 0
        assert "qp 2 names cq 0, which serves another queue pair" in ffi.string(err).decode()
        assert lib.gw_engine_remove_qp(engine, 1) == 0
        assert lib.gw_engine_add_qp(engine, qp_desc(2), err, 256) == 0, ffi.string(err).decode()
        assert lib.gw_engine_remove_qp(engine, 2) == 0
    finally:
        lib.gw_engine_destroy(engine)
