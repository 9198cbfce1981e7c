"""Engine behaviour no other test reached (issue 18): the fields of the CQEs the engine
writes, a completion queue that wraps, a send queue filled to exactly its size, staging
headers with a wrong or stale sequence number, and a pushed message cut part-way by
missing credits under the drop policy.

Every test here drives the engine from the host (``HostPoster``) and runs its passes in
this thread (``Context.poll``), so each outcome is exact, not a race.
"""
import time
from contextlib import contextmanager

import numpy as np
import pytest

from gwtest import ACCESS_RW, canaried
from gpuwrite import layouts as L
from gpuwrite._gw_cffi import lib
from gpuwrite.device import verbs as dv
from gpuwrite.host.verbs import Context, LinkConfig
from gpuwrite.host.wqe import HostPoster, rdma_write, rdma_write_inline

pytestmark = pytest.mark.timeout(30)


def cqe_entry(qs, slot: int, i: int = 0) -> np.void:
    """CQ entry ``slot`` of QP ``i`` as the engine left it, seen as ``struct gw_cqe64``."""
    raw = qs.cq.host[i].view(np.uint8)[slot * L.CQE_SIZE:(slot + 1) * L.CQE_SIZE]
    return raw.view(L.CQE64)[0]


def err_entry(qs, slot: int, i: int = 0) -> np.void:
    raw = qs.cq.host[i].view(np.uint8)[slot * L.CQE_SIZE:(slot + 1) * L.CQE_SIZE]
    return raw.view(L.ERR_CQE)[0]


def poll_until(ctx, p, count: int, deadline_s: float = 5.0) -> list:
    """Runs engine passes until ``count`` completions have been read (or the deadline)."""
    got = []
    end = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < end:
        ctx.poll(1)
        while (c := p.poll()) is not None:
            got.append(c)
    return got


def stage_push(qs, p, slot: int, seq: int, payload: np.ndarray, dst_addr: int, rkey: int,
               magic: int = L.STAGE_MAGIC, pad: int = 0) -> int:
    """Writes a staging header and ``payload`` at staging slot ``slot`` of QP 0, as the
    device verbs would, and a signaled WQE for them; returns the slots it takes (``pad``
    slots skipped at the ring's end before ``slot`` included)."""
    nbytes = len(payload)
    slot_bytes = qs.stage_slot_bytes
    lead = L.stage_lead_bytes(nbytes, slot_bytes)
    need = L.stage_slots_needed(nbytes, slot_bytes) + pad
    hdr = slot * slot_bytes + lead
    words = qs.stage.host[0]
    words[hdr // 4 + L.STAGE_W_MAGIC_SEQ] = magic | (seq & 0xFFFF)
    words[hdr // 4 + L.STAGE_W_BYTE_COUNT] = nbytes
    words[hdr // 4 + L.STAGE_W_SLOTS] = need
    words[hdr // 4 + L.STAGE_W_INDEX_FLAGS] = (p.pi & 0xFFFF) | \
        ((L.STAGE_F_ALIGNED if lead else 0) << 16)
    start = hdr + L.STAGE_HDR_BYTES
    words.view(np.uint8)[start:start + nbytes] = payload
    laddr = int(qs.info_host[0, dv.I_STAGE_ADDR]) + start
    p.write(rdma_write(p.pi, p.qpn, laddr, qs.stage_mr.lkey, nbytes, dst_addr, rkey))
    return need


def test_cqes_the_engine_writes_carry_count_counter_qpn_opcode_and_syndrome(nic):
    pd = nic.alloc_pd()
    src = (np.arange(1024) % 251).astype(np.uint8)
    whole, dst, guard = canaried(1024)
    smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p = HostPoster(qs)
    inline = bytes(range(200))
    p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 100, dmr.address, dmr.rkey))   # BB 0
    p.write(rdma_write_inline(p.pi, p.qpn, inline, dmr.address + 128, dmr.rkey))       # BBs 1-4
    p.write(rdma_write_inline(p.pi, p.qpn, inline[:40], dmr.address + 400, dmr.rkey))  # BBs 5-6
    p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address + 512, dmr.rkey,
                       signaled=False))                                                 # BB 7
    p.write(rdma_write(p.pi, p.qpn, smr.address + 8, smr.lkey, 36, dmr.address + 600,
                       dmr.rkey ^ 0x1))                                                 # BB 8
    before_ns = lib.gw_now_ns()
    p.ring()
    nic.poll(4)
    after_ns = lib.gw_now_ns()

    ok = [cqe_entry(qs, k) for k in (0, 1, 2)]
    assert [int(c["op_own"]) for c in ok] == [L.CQE_REQ << 4 | 0] * 3   # opcode, owner 0
    assert [int(c["byte_cnt"]) for c in ok] == [100, 200, 40]
    assert [int(c["wqe_counter"]) for c in ok] == [0, 1, 5]           # first BB of each
    assert [int(c["sop_drop_qpn"]) & 0xFFFFFF for c in ok] == [p.qpn] * 3
    for c in ok:
        assert before_ns <= int(c["timestamp"]) <= after_ns
    # The unsignaled WQE (BB 7) completed silently; the bad rkey one is the fourth CQE.
    err = err_entry(qs, 3)
    assert int(err["op_own"]) == L.CQE_REQ_ERR << 4 | 0
    assert int(err["wqe_counter"]) == 8
    assert int(err["syndrome"]) == L.SYNDROME["remote_access_err"]
    assert int(err["vendor_err_synd"]) == L.REASON["bad_rkey"]
    assert int(err["s_wqe_opcode_qpn"]) == L.OPCODE_RDMA_WRITE << 24 | p.qpn
    assert int(cqe_entry(qs, 4)["op_own"]) >> 4 == L.CQE_INVALID      # nothing more
    c = nic.counters()
    assert (c["cqes"], c["error_cqes"], c["msgs_delivered"]) == (4, 1, 4)
    assert c["bytes_delivered"] == 100 + 200 + 40 + 64
    assert np.array_equal(dst[:100], src[:100])
    assert bytes(dst[128:328]) == inline and bytes(dst[400:440]) == inline[:40]
    assert (dst[600:636] == 0xA5).all() and (whole[:guard] == 0xA5).all()


def copy_queue(nic, n_msgs: int, seed: int):
    """``n_msgs`` 64-byte messages' worth of source and (zeroed) destination, registered,
    and one QP of 16 BBs and 16 CQEs: (src, dst, src_mr, dst_mr, queues, poster)."""
    pd = nic.alloc_pd()
    src = (np.arange(64 * n_msgs) % seed).astype(np.uint8)
    dst = np.zeros_like(src)
    smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    return src, dst, smr, dmr, qs, HostPoster(qs)


def test_a_completion_queue_wraps_with_the_owner_bit_flipping_each_lap(nic):
    """Five laps of a 16-entry CQ: each lap's entries carry owner = lap & 1, and a reader
    that checks the owner bit sees every completion exactly once, in order."""
    src, dst, smr, dmr, qs, p = copy_queue(nic, 80, seed=241)
    seen = []
    for lap in range(5):
        for k in range(16 * lap, 16 * lap + 16):
            p.write(rdma_write(p.pi, p.qpn, smr.address + 64 * k, smr.lkey, 64,
                               dmr.address + 64 * k, dmr.rkey))
        p.ring()
        nic.poll(4)
        # Every entry of this lap is written before any is read: owner bits are exact.
        ops = [int(cqe_entry(qs, s)["op_own"]) for s in range(16)]
        assert ops == [L.CQE_REQ << 4 | (lap & 1)] * 16, f"lap {lap}"
        got = poll_until(nic, p, 16)
        assert all(c.ok for c in got)
        seen += [c.wqe_counter for c in got]
        assert p.poll() is None, f"lap {lap}: a completion was read twice"
    assert seen == list(range(80))
    assert np.array_equal(dst, src)
    assert nic.counters()["cqes"] == 80


def test_a_send_queue_filled_to_exactly_its_size_is_not_an_overflow(nic):
    """sq_bbs outstanding basic blocks is a full ring, not an overrun (one more is:
    test_protection.py); the CQ, as full, waits for the reader instead of overwriting a
    completion it has not read."""
    src, dst, smr, dmr, qs, p = copy_queue(nic, 32, seed=239)
    for k in range(16):
        p.write(rdma_write(p.pi, p.qpn, smr.address + 64 * k, smr.lkey, 64,
                           dmr.address + 64 * k, dmr.rkey))
    p.ring()
    nic.poll(4)
    c = nic.counters()
    assert c["ring_overflows"] == 0 and qs.qp_state(0) == "rts"
    assert c["cqes"] == 16 and c["error_cqes"] == 0
    # The ring is free again (all 16 completed); 16 more fill it a second time while the
    # CQ still holds 16 unread completions: the engine must wait, not overwrite them.
    for k in range(16, 32):
        p.write(rdma_write(p.pi, p.qpn, smr.address + 64 * k, smr.lkey, 64,
                           dmr.address + 64 * k, dmr.rkey))
    p.ring()
    nic.poll(4)
    c = nic.counters()
    assert c["cqes"] == 16 and c["cq_full_stalls"] > 0 and c["ring_overflows"] == 0
    assert [int(cqe_entry(qs, s)["wqe_counter"]) for s in range(16)] == list(range(16))
    got = poll_until(nic, p, 32)
    assert [g.wqe_counter for g in got] == list(range(32)) and all(g.ok for g in got)
    assert np.array_equal(dst, src) and qs.qp_state(0) == "rts"


@pytest.fixture
def pushed(nic):
    pd = nic.alloc_pd()
    whole, dst, guard = canaried(4096)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16, stage_slots=16, stage_slot_bytes=256)
    return qs, HostPoster(qs), dst, dmr


@pytest.mark.parametrize("first_seq,second_seq,bad", [
    (0, 1, None),            # both right
    (1, 2, 0),               # the first already wrong (one ahead)
    (0, 0, 1),               # the second repeats the first's: stale
    (0, 2, 1),               # the second skips one
])
def test_a_staging_header_with_a_wrong_sequence_is_a_bad_staging_error(nic, pushed, first_seq,
                                                                       second_seq, bad):
    qs, p, dst, dmr = pushed
    payloads = [np.full(64, 0x11, np.uint8), np.full(64, 0x22, np.uint8)]
    slot = stage_push(qs, p, 0, first_seq, payloads[0], dmr.address, dmr.rkey)
    stage_push(qs, p, slot, second_seq, payloads[1], dmr.address + 64, dmr.rkey)
    p.ring()
    got = poll_until(nic, p, 2)
    assert [g.ok for g in got] == [bad is None or k < bad for k in range(2)]
    if bad == 0:         # fetched with the first, before the QP went to the error state
        assert L.reason_name(got[1].reason) in ("bad_staging", "flushed"), got[1].describe()
    if bad is not None:
        assert got[bad].syndrome == L.SYNDROME["local_prot_err"], got[bad].describe()
        assert got[bad].reason == L.REASON["bad_staging"], got[bad].describe()
        assert (dst[64 * bad:128] == 0xA5).all(), "a push with a bad header wrote bytes"
        assert qs.qp_state(0) == "error"
    for k in range(2 if bad is None else bad):
        assert np.array_equal(dst[64 * k:64 * k + 64], payloads[k])


def test_a_header_with_the_wrong_magic_is_a_bad_staging_error(nic, pushed):
    qs, p, dst, dmr = pushed
    stage_push(qs, p, 0, 0, np.full(64, 0x33, np.uint8), dmr.address, dmr.rkey,
               magic=L.STAGE_MAGIC ^ 0x10000)
    p.ring()
    (got,) = poll_until(nic, p, 1)
    assert (got.syndrome, got.reason) == (L.SYNDROME["local_prot_err"], L.REASON["bad_staging"])
    assert (dst == 0xA5).all()


# 1 Gb/s, 512-byte packets, a receiver buffer of 16 credit blocks (1 KiB).
DROP_LINK = LinkConfig(rate_gbps=1.0, mtu_bytes=512, rx_credits=16, credit_latency_ns=2000)


@contextmanager
def stalled_link(policy: str, nbytes: int):
    """A context on DROP_LINK whose receiver is stalled, one QP with a 16-slot staging
    ring, and a canaried destination of ``nbytes``: (ctx, qs, poster, whole, dst, guard, mr)."""
    with Context(policy=policy, link=DROP_LINK) as ctx:
        pd = ctx.alloc_pd()
        whole, dst, guard = canaried(nbytes)
        dmr = pd.reg_mr(dst, access=ACCESS_RW)
        # Credits in the status line: the tests read what the NIC returned there.
        qs = pd.create_queues(1, sq_bbs=16, ncqe=16, stage_slots=16, stage_slot_bytes=256,
                              stage_credits="status")
        ctx.stall_receiver(True)
        yield ctx, qs, HostPoster(qs), whole, dst, guard, dmr


def test_a_message_cut_part_way_by_missing_credits_is_counted_byte_for_byte():
    """Under ``drop``, a 1536-byte push into a stalled 1 KiB receiver: its first two
    packets take the credits, the third is lost. The next message is lost whole. Both come
    back as dropped error completions; every byte is delivered or counted dropped."""
    with stalled_link("drop", 4096) as (ctx, qs, p, whole, dst, guard, dmr):
        first = (np.arange(1536) % 253).astype(np.uint8)
        second = np.full(512, 0x5A, np.uint8)
        slots = stage_push(qs, p, 0, 0, first, dmr.address, dmr.rkey)
        slots += stage_push(qs, p, slots, 1, second, dmr.address + 2048, dmr.rkey)
        p.ring()
        got = poll_until(ctx, p, 2)
        c = ctx.counters()
        # Drops do not move the QP to the error state (read before the context closes,
        # which flushes and destroys its QPs).
        state = qs.qp_state(0)
    assert [g.wqe_counter for g in got] == [0, 1]
    for g in got:
        assert not g.ok
        assert g.syndrome == L.SYNDROME["transport_retry_exc_err"], g.describe()
        assert g.reason == L.REASON["dropped"], g.describe()
    assert np.array_equal(dst[:1024], first[:1024])        # the two packets that had credits
    assert (dst[1024:] == 0xA5).all(), "dropped bytes reached the destination"
    assert (whole[:guard] == 0xA5).all() and (whole[guard + 4096:] == 0xA5).all()
    assert c["bytes_pushed"] == 1536 + 512
    assert c["bytes_delivered"] == 1024
    assert c["dropped_bytes"] == 512 + 512
    assert c["bytes_pushed"] == c["bytes_delivered"] + c["dropped_bytes"]
    assert (c["dropped_msgs"], c["error_cqes"], c["msgs_delivered"]) == (2, 2, 0)
    assert (c["held_msgs"], c["held_bytes"]) == (0, 0)
    assert c["held_bytes_max"] == 1024                      # what was accepted, never more
    # Drops do not move the QP to the error state, and every slot came back.
    assert state == "rts"
    assert int(qs.status.host[0, L.STATUS_W_STAGE_FREED]) == slots


def test_a_packet_with_a_partial_credit_block_takes_a_whole_block():
    """A 1000-byte push is packets of 512 and 488 bytes: 8 + 8 credit blocks (488 bytes
    round up), all 16 the stalled receiver has; the 24-byte push after it finds none."""
    with stalled_link("drop", 2048) as (ctx, qs, p, whole, dst, guard, dmr):
        first = (np.arange(1000) % 249).astype(np.uint8)
        slots = stage_push(qs, p, 0, 0, first, dmr.address, dmr.rkey)
        stage_push(qs, p, slots, 1, np.full(24, 7, np.uint8), dmr.address + 1024, dmr.rkey)
        p.ring()
        got = poll_until(ctx, p, 2)
        c = ctx.counters()
    assert [g.ok for g in got] == [True, False]
    assert got[1].reason == L.REASON["dropped"]
    assert np.array_equal(dst[:1000], first) and (dst[1000:] == 0xA5).all()
    assert (c["bytes_delivered"], c["dropped_bytes"], c["dropped_msgs"]) == (1000, 24, 1)
    assert c["rx_occupied_blocks"] == 16 and c["credits_available"] == 0


def test_an_inline_length_past_its_wqe_is_a_length_error(nic):
    """An inline segment claiming more bytes than the WQE's segments hold would make the
    NIC read past the WQE (into the next one): a length error, nothing written."""
    pd = nic.alloc_pd()
    whole, dst, guard = canaried(512)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p = HostPoster(qs)
    wqe = bytearray(rdma_write_inline(p.pi, p.qpn, bytes(range(40)), dmr.address, dmr.rkey))
    # 40 bytes take 5 segments (ds=5, two BBs); claim 100, which reaches into a third BB.
    assert len(wqe) == 2 * L.WQE_BB
    wqe[L.DATA_BASE:L.DATA_BASE + 4] = np.array([100 | L.INLINE_SEG_FLAG], ">u4").tobytes()
    p.write(bytes(wqe))
    # Bytes in that third BB (not posted: the doorbell covers the one WQE).
    qs.sq.host[0].view(np.uint8)[2 * L.WQE_BB:3 * L.WQE_BB] = np.arange(64, dtype=np.uint8)
    p.ring()
    nic.poll(4)
    (got,) = poll_until(nic, p, 1)
    assert (got.syndrome, got.reason) == (L.SYNDROME["local_length_err"], L.REASON["length"])
    assert (dst == 0xA5).all()


def test_a_write_one_byte_past_a_region_is_refused_and_one_to_its_end_is_not(nic):
    pd = nic.alloc_pd()
    src = np.arange(256, dtype=np.uint8)
    whole, dst, guard = canaried(256)
    smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p = HostPoster(qs)
    p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address + 192, dmr.rkey))
    p.write(rdma_write(p.pi, p.qpn, smr.address + 192, smr.lkey, 64, dmr.address, dmr.rkey))
    p.write(rdma_write(p.pi, p.qpn, smr.address + 193, smr.lkey, 64, dmr.address, dmr.rkey))
    p.ring()
    nic.poll(4)
    got = poll_until(nic, p, 3)
    assert [g.ok for g in got] == [True, True, False]
    assert got[2].reason == L.REASON["local_bounds"]
    # and the same past the destination's end, on a fresh QP
    qs2 = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p2 = HostPoster(qs2)
    p2.write(rdma_write(p2.pi, p2.qpn, smr.address, smr.lkey, 64, dmr.address + 193, dmr.rkey))
    p2.ring()
    nic.poll(4)
    (bad,) = poll_until(nic, p2, 1)
    assert bad.reason == L.REASON["remote_bounds"]
    assert np.array_equal(dst[192:], src[:64]) and np.array_equal(dst[:64], src[192:])
    assert (whole[guard + 256:] == 0xA5).all() and (whole[:guard] == 0xA5).all()


def test_the_staging_region_is_no_write_destination(nic):
    """A staging region's key is no rkey, even one registered with remote write access:
    a remote write there would overwrite payloads the GPU has pushed."""
    pd = nic.alloc_pd()
    src = np.full(64, 0x77, np.uint8)
    smr = pd.reg_mr(src)
    staging = np.zeros(256, dtype=np.uint8)
    stmr = pd.reg_mr(staging, access=ACCESS_RW, kind=L.MEM_STAGING)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p = HostPoster(qs)
    p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, stmr.address, stmr.rkey))
    p.ring()
    nic.poll(4)
    (got,) = poll_until(nic, p, 1)
    assert (got.syndrome, got.reason) == (L.SYNDROME["remote_access_err"], L.REASON["bad_rkey"])
    assert not staging.any()


def _wqe_with(p, field: str, value: int, smr, dmr) -> bytes:
    """A valid one-BB RDMA write with one control-segment field changed."""
    wqe = bytearray(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey))
    ctrl = np.frombuffer(bytes(wqe[:16]), dtype=L.CTRL_SEG).copy()
    ctrl[field] = value
    wqe[:16] = ctrl.tobytes()
    return bytes(wqe)


@pytest.mark.parametrize("field,value,reason", [
    # the WQE index of the next WQE, not this one's
    ("opmod_idx_opcode", 1 << 8 | L.OPCODE_RDMA_WRITE, "bad_wqe_index"),
    # 33 segments: more than the 8 BBs (32 segments) a WQE may span
    ("qpn_ds", None, "bad_ds"),
])
def test_a_control_segment_out_of_line_is_refused(nic, field, value, reason):
    pd = nic.alloc_pd()
    src = np.full(64, 0x42, np.uint8)
    whole, dst, guard = canaried(64)
    smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=64, ncqe=64)
    p = HostPoster(qs)
    if value is None:
        value = p.qpn << 8 | (L.MAX_WQE_BBS * L.WQE_BB // L.WQE_DS + 1)
    p.write(_wqe_with(p, field, value, smr, dmr) + bytes(8 * L.WQE_BB))
    p.ring()
    nic.poll(4)
    got = poll_until(nic, p, 1)
    assert got and not got[0].ok and L.reason_name(got[0].reason) == reason, got
    assert got[0].syndrome == L.SYNDROME["local_qp_op_err"]
    assert (whole == 0xA5).all()


@pytest.mark.parametrize("kwargs,match", [
    (dict(sq_bbs=64, ncqe=32), "ncqe=32 must be at least sq_bbs=64"),
    (dict(sq_bbs=48), "sq_bbs=48: must be a power of two from 16 to 32768"),
    (dict(ncqe=48 * 16), "ncqe=768: must be a power of two"),
    (dict(stage_slot_bytes=96), "stage_slot_bytes=96: must be a power of two"),
    (dict(bounce_bytes=4098), "bounce_bytes=4098: a multiple of 4"),
])
def test_queue_sizes_are_validated_with_named_errors(nic, kwargs, match):
    with pytest.raises(ValueError, match=match):
        nic.alloc_pd().create_queues(1, **kwargs)


def test_a_receiver_smaller_than_one_packet_is_refused():
    with pytest.raises(ValueError, match="rx_credits=15 blocks of 64 bytes cannot hold one "
                                         "1024-byte packet: need at least 16"):
        LinkConfig(rate_gbps=1.0, mtu_bytes=1024, rx_credits=15)
    assert LinkConfig(rate_gbps=1.0, mtu_bytes=1024, rx_credits=16).rx_credits == 16


def test_hold_sends_no_packet_the_receiver_has_no_room_for():
    """Under ``hold``, a 2048-byte push into a stalled 1 KiB receiver: two 512-byte
    packets take its 16 credit blocks, the rest waits in the staging region (no third
    packet on credits that are not there), and all of it goes once the receiver drains."""
    with stalled_link("hold", 2048) as (ctx, qs, p, whole, dst, guard, dmr):
        payload = (np.arange(2048) % 247).astype(np.uint8)
        stage_push(qs, p, 0, 0, payload, dmr.address, dmr.rkey)
        p.ring()
        assert poll_until(ctx, p, 1, deadline_s=0.05) == []      # 50 ms: 12000 packet times
        c = ctx.counters()
        assert (c["rx_occupied_blocks"], c["credits_available"]) == (16, 0)
        assert c["bytes_delivered"] == 1024 and c["credit_stalls"] > 0
        assert (c["held_msgs"], c["held_bytes"]) == (1, 1024)
        assert (dst[1024:] == 0xA5).all()
        ctx.stall_receiver(False)
        got = poll_until(ctx, p, 1)
        c = ctx.counters()
    assert len(got) == 1 and got[0].ok
    assert np.array_equal(dst, payload)
    assert (c["bytes_delivered"], c["dropped_bytes"], c["held_bytes"]) == (2048, 0, 0)


def test_multi_bb_wqes_return_all_their_ring_space(nic):
    """Inline WQEs of 4 BBs, four at a time, fill a 16-BB send queue exactly, five laps
    over: each completion returns all four of its BBs, or a later lap overruns."""
    pd = nic.alloc_pd()
    whole, dst, guard = canaried(20 * 200)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p = HostPoster(qs)
    payloads = [((np.arange(200) + k) % 256).astype(np.uint8).tobytes() for k in range(20)]
    seen = []
    for lap in range(5):
        for k in range(4 * lap, 4 * lap + 4):
            wqe = rdma_write_inline(p.pi, p.qpn, payloads[k], dmr.address + 200 * k, dmr.rkey)
            assert len(wqe) == 4 * L.WQE_BB
            p.write(wqe)
        p.ring()
        got = poll_until(nic, p, 4)
        assert [g.ok for g in got] == [True] * 4, [g.describe() for g in got]
        seen += [g.wqe_counter for g in got]
    assert seen == [4 * k for k in range(20)]
    assert nic.counters()["ring_overflows"] == 0
    assert bytes(dst) == b"".join(payloads)


def test_a_push_padded_at_the_ring_end_is_taken_from_slot_0(nic):
    """A 4-slot ring: A takes slots 0-2; B needs 2, which do not fit at 3, so the GPU
    skips slot 3 and puts B at slot 0, its header saying 3 slots (1 of padding). The NIC
    must look for it there, and return all 3 slots with it."""
    pd = nic.alloc_pd()
    whole, dst, guard = canaried(1024)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16, stage_slots=4, stage_slot_bytes=256,
                          stage_credits="status")
    p = HostPoster(qs)
    a = (np.arange(600) % 251).astype(np.uint8)            # 112 + 16 + 600 bytes: 3 slots
    b = np.full(300, 0x3C, np.uint8)                        # 16 + 300 bytes: 2 slots
    assert stage_push(qs, p, 0, 0, a, dmr.address, dmr.rkey) == 3
    p.ring()
    (first,) = poll_until(nic, p, 1)
    assert stage_push(qs, p, 0, 1, b, dmr.address + 600, dmr.rkey, pad=1) == 3
    p.ring()
    (second,) = poll_until(nic, p, 1)
    assert first.ok and second.ok, second.describe()
    assert np.array_equal(dst[:600], a) and np.array_equal(dst[600:900], b)
    assert int(qs.status.host[0, L.STATUS_W_STAGE_FREED]) == 6
