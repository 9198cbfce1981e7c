"""Device-verb behaviour no other test reached (issue 18): a completion queue that wraps
under ``poll_cq``, and a staging run that needs padding at the ring's end while earlier
slots are still held."""
import numpy as np
import pytest

from gwtest import ACCESS_RW
from gpuwrite import layouts as L
from gpuwrite.cudaenv import cuda
from gpuwrite.device import verbs as dv
from gpuwrite.device.intrinsics import bswap32
from gpuwrite.host.memory import mapped
from gpuwrite.host.verbs import Context

N_WQES = 56          # three and a half laps of a 16-entry CQ
WAIT_NS = 2_000_000_000
# Shared-array shapes must be globals of this module to be compile-time constants.
QP_STATE_SHAPE = dv.QP_STATE_SHAPE
QP_INFO_SHAPE = dv.QP_INFO_SHAPE


def _one_qp(ctx, words: int, fill: np.ndarray | None = None):
    """A protection domain with a source and a destination of ``words`` mapped words,
    both registered, and one QP of 16 BBs and 16 CQEs: (src, dst, smr, dmr, qs)."""
    pd = ctx.alloc_pd()
    src = mapped((words,), np.uint32)
    if fill is not None:
        src.host[:] = fill
    dst = mapped((words,), np.uint32)
    smr = pd.reg_mr(src, access=L.ACCESS_LOCAL_WRITE)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    return src, dst, smr, dmr, pd.create_queues(1, sq_bbs=16, ncqe=16)


@cuda.jit
def _post_each_and_wait(Q, src_addr, lkey, dst_addr, rkey, out):
    """Posts N signaled 64-byte writes one at a time, waiting for each; records the
    status and what the QP state says after each wait."""
    if cuda.threadIdx.x == 0:
        for k in range(out.shape[0]):
            st = dv.sq_reserve(Q, 0, 1, WAIT_NS)
            if st == dv.OK:
                dv.wqe_rdma_write(Q, 0, src_addr + 64 * k, lkey, 64, dst_addr + 64 * k, rkey,
                                  True, 0)
                dv.ring_doorbell(Q, 0)
                st = dv.wait_done(Q, 0, Q[dv.Q_STATE][0, dv.S_PI], WAIT_NS)
            out[k, 0] = st
            out[k, 1] = Q[dv.Q_STATE][0, dv.S_DONE]
            out[k, 2] = Q[dv.Q_STATE][0, dv.S_CQ_CI]
            out[k, 3] = Q[dv.Q_STATE][0, dv.S_LAST_CQE]
            out[k, 4] = bswap32(Q[dv.Q_CQDB][0][L.CQ_DBREC_W_SET_CI])
            if st != dv.OK:
                return


@pytest.mark.timeout(60)
def test_poll_cq_follows_the_owner_bit_through_several_laps_of_the_cq():
    """A CQ of 16 entries and 56 completions: from the second lap on, an entry whose owner
    bit is that of the previous lap is an old completion, never a new one. The consumer
    index reaches the NIC lazily (``cq_publish``): each doorbell hands back every CQE
    consumed before it, so the CQ's record lags the kernel by the one completion consumed
    since, and the NIC never finds the CQ full."""
    with Context() as ctx:
        src, dst, smr, dmr, qs = _one_qp(
            ctx, N_WQES * 16, np.arange(N_WQES * 16, dtype=np.uint32) * 2654435761)
        out = cuda.to_device(np.zeros((N_WQES, 5), dtype=np.int64))
        ctx.start()
        _post_each_and_wait[1, 1](qs.device_args, smr.address, smr.lkey, dmr.address, dmr.rkey,
                                  out)
        cuda.synchronize()
        got = out.copy_to_host()
        delivered = dst.host.copy()
        counters = ctx.counters()
    cqes = counters["cqes"]
    k = np.arange(N_WQES)
    assert (got[:, 0] == dv.OK).all(), f"statuses {got[:, 0].tolist()}"
    assert got[:, 1].tolist() == (k + 1).tolist(), "S_DONE after each wait"
    assert got[:, 2].tolist() == (k + 1).tolist(), "completions consumed after each wait"
    assert got[:, 3].tolist() == k.tolist(), "the completion each wait consumed"
    assert got[:, 4].tolist() == k.tolist(), "consumer index in the CQ's doorbell record"
    assert cqes == N_WQES and counters["cq_full_stalls"] == 0
    assert np.array_equal(delivered, src.host)


@cuda.jit
def _post_cached_and_wait(Q, src_addr, lkey, dst_addr, rkey, n, out):
    """Posts ``n`` 64-byte writes one at a time from a block's cached copy of the QP state
    (as send_messages and the put API keep it), then hands the QP back."""
    sh_state = cuda.shared.array(QP_STATE_SHAPE, dtype=np.int64)
    sh_info = cuda.shared.array(QP_INFO_SHAPE, dtype=np.int64)
    if cuda.threadIdx.x == 0:
        dv.qp_cache_load(Q, 0, sh_state, sh_info)
        q = dv.qp_cached(Q, 0, sh_state, sh_info)
        st = dv.OK
        for k in range(n):
            if st == dv.OK:
                dv.wqe_rdma_write(q, 0, src_addr + 64 * k, lkey, 64, dst_addr + 64 * k, rkey,
                                  True, 0)
                dv.ring_doorbell(q, 0)
                st = dv.wait_done(q, 0, sh_state[0, dv.S_PI], WAIT_NS)
        out[0] = st
        out[1] = bswap32(Q[dv.Q_CQDB][0][L.CQ_DBREC_W_SET_CI])
        dv.qp_cache_store(Q, 0, sh_state)
        out[2] = bswap32(Q[dv.Q_CQDB][0][L.CQ_DBREC_W_SET_CI])


@pytest.mark.timeout(30)
def test_a_kernel_that_hands_its_qp_back_hands_back_every_completion_it_consumed():
    """Before ``qp_cache_store`` the CQ's record lags by the completion consumed since the
    last doorbell; after it, it holds all of them, as the QP state the next kernel reads."""
    n = 3
    with Context() as ctx:
        src, dst, smr, dmr, qs = _one_qp(ctx, n * 16, np.arange(n * 16, dtype=np.uint32) + 7)
        out = cuda.to_device(np.zeros(3, dtype=np.int64))
        ctx.start()
        _post_cached_and_wait[1, 1](qs.device_args, smr.address, smr.lkey, dmr.address,
                                    dmr.rkey, n, out)
        cuda.synchronize()
        got = out.copy_to_host().tolist()
        state = qs.gpu_state()
        delivered = dst.host.copy()
    assert got == [dv.OK, n - 1, n]
    assert state[0, dv.S_CQ_CI] == state[0, dv.S_CQ_PUB] == n
    assert np.array_equal(delivered, src.host)


@cuda.jit
def _reserve(Q, sizes, out):
    if cuda.threadIdx.x == 0:
        for k in range(sizes.shape[0]):
            st, first, total = dv.stage_reserve(Q, 0, sizes[k], 50_000_000)
            out[k, 0] = st
            out[k, 1] = first
            out[k, 2] = total
            out[k, 3] = Q[dv.Q_STATE][0, dv.S_STAGE_RES]


SLOT = 64


def _slots_bytes(n_slots: int) -> int:
    """A payload that, with its header, takes exactly ``n_slots`` slots."""
    return n_slots * SLOT - L.STAGE_HDR_BYTES


@pytest.mark.timeout(30)
@pytest.mark.parametrize("seen", [False, True])
def test_a_run_padded_at_the_ring_end_waits_for_the_pad_slots_while_they_are_held(nic, seen):
    """An 8-slot ring: A takes slots 0-1, B slots 2-5. With A returned and B still held,
    a 3-slot run does not fit at 6-7: it must start at 0 with 2 slots of padding, 5 slots
    in all, and only 4 are free, so it waits (and times out). Once B is returned it gets
    slot 0 and is charged 5 slots. ``seen``: the GPU has already read that A came back
    (its copy of the NIC's counter is current), so only the padding makes it wait."""
    qs = nic.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16, stage_slots=8,
                                      stage_slot_bytes=SLOT, stage_credits="status")
    freed = qs.status.host[0, L.STATUS_W_STAGE_FREED:L.STATUS_W_STAGE_FREED + 1]

    def reserve(*n_slots):
        out = cuda.to_device(np.zeros((len(n_slots), 4), dtype=np.int64))
        sizes = np.array([_slots_bytes(n) for n in n_slots], dtype=np.int64)
        _reserve[1, 1](qs.device_args, cuda.to_device(sizes), out)
        return out.copy_to_host().tolist()

    slot_words = SLOT // 4
    assert reserve(2, 4) == [[dv.OK, 0, 2, 2], [dv.OK, 2 * slot_words, 4, 6]]
    freed[0] = 2                                   # the NIC returns A; B stays held
    if seen:
        state = qs.state.copy_to_host()
        state[0, dv.S_STAGE_FREED] = 2
        qs.state.copy_to_device(state)
    assert reserve(3)[0][0] == dv.E_TIMEOUT_STAGING
    freed[0] = 6                                   # and now B
    assert reserve(3) == [[dv.OK, 0, 5, 11]]
    # The ring is at slot 3 with 3 slots held (0-2): 5 fit at 3-7, no padding.
    freed[0] = 8
    assert reserve(5) == [[dv.OK, 3 * slot_words, 5, 16]]


@cuda.jit
def _bounce(Q, sizes, out):
    if cuda.threadIdx.x == 0:
        for k in range(sizes.shape[0]):
            st, word = dv.bounce_reserve(Q, 0, sizes[k], 50_000_000)
            out[k, 0] = st
            out[k, 1] = word
            out[k, 2] = Q[dv.Q_STATE][0, dv.S_BOUNCE_RES]


def _bounce_model(ring: int, sizes):
    """What bounce_reserve must answer with every word free: runs in order, one that would
    cross the ring's end at word 0 with the skipped words charged; too large refused."""
    res, rows = 0, []
    for n in sizes:
        if n > ring:
            rows.append([dv.E_TOO_LARGE, 0, res])
            continue
        pos = res % ring
        pad = ring - pos if pos + n > ring else 0
        res += pad + n
        rows.append([dv.OK, (pos + pad) % ring, res])
    return rows


@pytest.mark.timeout(30)
def test_bounce_runs_wrap_a_ring_of_any_size_in_words(nic):
    """A 100-word bounce ring (no power of two: its position is kept, not taken modulo
    the ring): runs that end exactly at the end, that would cross it and start at word
    0 with the rest charged, one of the whole ring, one too large; with every word free,
    each answer is the ring model's. Then a run that does not fit what is free waits,
    and times out with the bounce ring's own code."""
    qs = nic.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16, bounce_bytes=400)
    state = qs.state.copy_to_host()
    state[0, dv.S_BOUNCE_FREE] = 1 << 40
    qs.state.copy_to_device(state)
    sizes = [12, 40, 48, 16, 100, 4, 101, 96, 8, 60, 40, 36, 64]
    out = cuda.to_device(np.zeros((len(sizes), 3), dtype=np.int64))
    _bounce[1, 1](qs.device_args, cuda.to_device(np.array(sizes, dtype=np.int64)), out)
    got = out.copy_to_host().tolist()
    assert got == _bounce_model(100, sizes)
    assert [w for st, w, _ in got if st == dv.OK][:6] == [0, 12, 52, 0, 0, 0]
    state = qs.state.copy_to_host()
    state[0, dv.S_BOUNCE_FREE] = state[0, dv.S_BOUNCE_RES] - 100 + 20    # 20 words free
    qs.state.copy_to_device(state)
    out = cuda.to_device(np.zeros((1, 3), dtype=np.int64))
    _bounce[1, 1](qs.device_args, cuda.to_device(np.array([24], dtype=np.int64)), out)
    assert out.copy_to_host()[0, 0] == dv.E_TIMEOUT_BOUNCE


@cuda.jit
def _staged_claims(Q, sizes, out):
    if cuda.threadIdx.x == 0:
        for k in range(sizes.shape[0]):
            out[k, 0], out[k, 1] = dv.staged_claim(Q, 0, sizes[k], 50_000_000)


def test_host_staged_claims_whole_vectors_of_the_bounce_ring(nic):
    """staged_claim charges a payload whole 16-byte vectors (a 20-byte one takes 32 bytes),
    so that every run starts on a vector, where one thread's 16-byte stores can go."""
    qs = nic.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16, bounce_bytes=1024)
    sizes = np.array([20, 64, 4, 100, 16], dtype=np.int64)
    out = cuda.to_device(np.zeros((len(sizes), 2), dtype=np.int64))
    _staged_claims[1, 1](qs.device_args, cuda.to_device(sizes), out)
    assert out.copy_to_host().tolist() == [[dv.OK, w] for w in (0, 8, 24, 28, 56)]


@cuda.jit
def _post_bad_rkey_and_wait(Q, src_addr, lkey, dst_addr, rkey, out):
    if cuda.threadIdx.x == 0:
        dv.wqe_rdma_write(Q, 0, src_addr, lkey, 64, dst_addr, rkey ^ 0x3, True, 0)
        dv.ring_doorbell(Q, 0)
        out[0] = dv.wait_done(Q, 0, Q[dv.Q_STATE][0, dv.S_PI], WAIT_NS)
        out[1] = Q[dv.Q_STATE][0, dv.S_LAST_SYND]
        out[2] = dv.qp_in_error(Q, 0)


@pytest.mark.timeout(30)
def test_a_device_wait_reports_the_error_completion_s_syndrome_and_reason():
    with Context() as ctx:
        src, dst, smr, dmr, qs = _one_qp(ctx, 16)
        out = cuda.to_device(np.zeros(3, dtype=np.int64))
        ctx.start()
        _post_bad_rkey_and_wait[1, 1](qs.device_args, smr.address, smr.lkey, dmr.address,
                                      dmr.rkey, out)
        cuda.synchronize()
        status, synd, in_error = out.copy_to_host().tolist()
    assert status == dv.E_CQE_ERROR
    assert synd >> 8 == L.SYNDROME["remote_access_err"]
    assert synd & 0xFF == L.REASON["bad_rkey"]
    assert in_error == 1


# -- completions read while the kernel runs ahead of the NIC, made deterministic ----------
# The engine is stopped (the ``nic`` fixture) and advanced by the test with ``ctx.poll``,
# so the GPU reads the CQ at a chosen point: before the NIC has written the next entry,
# or while a later WQE is already written. With the engine's own thread these needed a
# race the engine nearly always wins (TESTING.md, "Kills that once depended on a race").

@cuda.jit
def _post_n(Q, src_addr, lkey, dst_addr, rkey, first, n):
    """Writes ``n`` signaled 64-byte RDMA writes (64 B apart from ``first``), one doorbell."""
    if cuda.threadIdx.x == 0:
        for k in range(first, first + n):
            dv.wqe_rdma_write(Q, 0, src_addr + 64 * k, lkey, 64, dst_addr + 64 * k, rkey, True, 0)
        dv.ring_doorbell(Q, 0)


@cuda.jit
def _poll_n(Q, n, out):
    """Up to ``n`` polls of QP 0's CQ, then hands the consumed entries back; records what
    was taken and the QP state after."""
    if cuda.threadIdx.x == 0:
        got = 0
        for _ in range(n):
            got += dv.poll_cq(Q, 0)
        dv.cq_publish(Q, 0)
        out[0] = got
        out[1] = Q[dv.Q_STATE][0, dv.S_CQ_CI]
        out[2] = Q[dv.Q_STATE][0, dv.S_DONE]
        out[3] = Q[dv.Q_STATE][0, dv.S_STAGE_FREED]
        out[4] = Q[dv.Q_STATE][0, dv.S_LAST_CQE]


def _engine_until(ctx, cqes: int):
    for _ in range(10_000):
        if ctx.counters()["cqes"] >= cqes:
            return
        ctx.poll(1)
    raise AssertionError(f"the engine wrote {ctx.counters()['cqes']} of {cqes} completions")


def _poll(qs, n):
    out = cuda.to_device(np.zeros(5, dtype=np.int64))
    _poll_n[1, 1](qs.device_args, n, out)
    cuda.synchronize()
    return out.copy_to_host()


@pytest.mark.timeout(60)
def test_an_entry_of_the_last_lap_is_not_a_new_completion(nic):
    """A full lap of 16 completions is consumed; a 17th WQE is posted but the NIC has not
    written its completion: entry 0 still holds lap 1's (owner 0, a valid opcode), and
    poll_cq must not take it for the new one."""
    src, dst, smr, dmr, qs = _one_qp(nic, 17 * 16, np.arange(17 * 16, dtype=np.uint32) + 1)
    args = (qs.device_args, smr.address, smr.lkey, dmr.address, dmr.rkey)
    _post_n[1, 1](*args, 0, 16)
    cuda.synchronize()
    _engine_until(nic, 16)
    got = _poll(qs, 16)
    assert got[:3].tolist() == [16, 16, 16], got
    _post_n[1, 1](*args, 16, 1)
    cuda.synchronize()
    got = _poll(qs, 1)                       # the NIC has not run since
    assert got[:3].tolist() == [0, 16, 16], f"took an old entry: {got.tolist()}"
    _engine_until(nic, 17)
    got = _poll(qs, 1)
    assert got[:3].tolist() == [1, 17, 17] and got[4] == 16, got
    assert np.array_equal(dst.host, src.host)


@cuda.jit
def _post_two(Q, src, src_addr, lkey, dst_addr, rkey, first_aux):
    """WQE 0: a 64-byte write whose completion frees staging up to ``first_aux``'s cursor,
    doorbell rung; WQE 1: an inline write of several BBs, written but not yet announced."""
    if cuda.threadIdx.x == 0:
        dv.wqe_rdma_write(Q, 0, src_addr, lkey, 64, dst_addr, rkey, True, first_aux)
        dv.ring_doorbell(Q, 0)
        dv.wqe_rdma_write_inline(Q, 0, src, 16, 200, dst_addr + 64, rkey, True)


@pytest.mark.timeout(60)
def test_a_completion_read_behind_a_later_wqe_uses_its_own_wqe_bookkeeping(nic):
    """The NIC has completed WQE 0 while WQE 1 (several BBs, another staging cursor) is
    already written: WQE 0's completion retires one BB and frees its own cursor, not the
    last WQE's."""
    src, dst, smr, dmr, qs = _one_qp(nic, 1024, np.arange(1024, dtype=np.uint32) + 7)
    aux = dv.AUX_STAGE | 5
    _post_two[1, 1](qs.device_args, src.kernel, smr.address, smr.lkey, dmr.address, dmr.rkey,
                    aux)
    cuda.synchronize()
    _engine_until(nic, 1)
    got = _poll(qs, 1)
    assert got[0] == 1 and got[4] == 0, got
    assert got[2] == 1, f"S_DONE {got[2]}: WQE 0 is one BB (WQE 1 four)"
    assert got[3] == 5, f"S_STAGE_FREED {got[3]}: WQE 0's cursor"
