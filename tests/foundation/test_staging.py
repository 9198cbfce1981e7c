"""The staging header: where it sits, and what the engine accepts in front of a payload."""
import numpy as np
import pytest

from gwtest import ACCESS_RW
from gpuwrite import layouts as L
from gpuwrite.cudaenv import cuda
from gpuwrite.device import verbs as dv
from gpuwrite.host.wqe import HostPoster, rdma_write

SLOT = 256


@cuda.jit
def _place(Q, sizes, out):
    if cuda.threadIdx.x == 0:
        for k in range(sizes.shape[0]):
            st, first, total = dv.stage_reserve(Q, 0, sizes[k], 1_000_000)
            out[k, 0] = st
            out[k, 1] = first
            out[k, 2] = dv.stage_header(Q, 0, first, sizes[k], total, k)
            # Nothing is posted: hand the slots straight back for the next size.
            Q[dv.Q_STATE][0, dv.S_STAGE_FREED] = Q[dv.Q_STATE][0, dv.S_STAGE_RES]


def _push(nic, qs, dst_mr, lead, flags, nbytes, payload_at=None):
    """Writes a staging header ``lead`` bytes into slot 0 and posts a WQE for the payload."""
    stage = qs.stage.host[0]
    hdr_word = lead // 4
    payload_byte = payload_at if payload_at is not None else lead + L.STAGE_HDR_BYTES
    data = np.arange(nbytes // 4, dtype=np.uint32) + 7
    stage[payload_byte // 4:payload_byte // 4 + len(data)] = data
    slots = -(-(lead + L.STAGE_HDR_BYTES + nbytes) // SLOT)
    stage[hdr_word + L.STAGE_W_MAGIC_SEQ] = L.STAGE_MAGIC | 0
    stage[hdr_word + L.STAGE_W_BYTE_COUNT] = nbytes
    stage[hdr_word + L.STAGE_W_SLOTS] = slots
    stage[hdr_word + L.STAGE_W_INDEX_FLAGS] = 0 | flags << 16
    p = HostPoster(qs)
    laddr = int(qs.info_host[0, dv.I_STAGE_ADDR]) + payload_byte
    p.write(rdma_write(p.pi, p.qpn, laddr, qs.stage_mr.lkey, nbytes, dst_mr.address,
                       dst_mr.rkey))
    p.ring()
    nic.poll(8)
    c = p.poll()
    assert c is not None, "the engine wrote no completion"
    return c, data


@pytest.fixture
def queues(nic):
    pd = nic.alloc_pd()
    dst = np.zeros(4096, dtype=np.uint8)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16, stage_slots=8, stage_slot_bytes=SLOT)
    return qs, dst, dmr


def test_aligned_payload_starts_on_a_128_byte_line(nic, queues):
    qs, dst, dmr = queues
    lead = L.STAGE_ALIGN_BYTES - L.STAGE_HDR_BYTES
    c, data = _push(nic, qs, dmr, lead, L.STAGE_F_ALIGNED, 512)
    assert c.ok, c.describe()
    assert np.array_equal(dst[:512].view(np.uint32), data)


def test_header_at_slot_start_is_the_small_message_layout(nic, queues):
    qs, dst, dmr = queues
    c, data = _push(nic, qs, dmr, 0, 0, 64)
    assert c.ok, c.describe()
    assert np.array_equal(dst[:64].view(np.uint32), data)


@pytest.mark.parametrize("lead,flags", [
    (0, L.STAGE_F_ALIGNED),                                   # flag says aligned, it is not
    (L.STAGE_ALIGN_BYTES - L.STAGE_HDR_BYTES, 0),             # aligned, flag missing
    (0, 0x8),                                                 # unknown flag
])
def test_a_header_out_of_place_is_a_bad_staging_error(nic, queues, lead, flags):
    qs, dst, dmr = queues
    c, _ = _push(nic, qs, dmr, lead, flags, 512)
    assert not c.ok
    assert L.reason_name(c.reason) == "bad_staging"
    assert not dst.any(), "a rejected push wrote bytes"


def test_device_verbs_put_large_payloads_on_128_byte_lines(nic):
    pd = nic.alloc_pd()
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16, stage_slots=8, stage_slot_bytes=SLOT)
    sizes = np.array([64, 508, 512, 1024], dtype=np.int64)
    out = cuda.to_device(np.zeros((len(sizes), 3), dtype=np.int64))
    _place[1, 1](qs.device_args, cuda.to_device(sizes), out)
    got = out.copy_to_host()
    assert (got[:, 0] == 0).all()
    payload_bytes = got[:, 2] * 4
    slot_start = got[:, 1] * 4
    assert list(payload_bytes - slot_start) == [16, 16, 128, 128]
    assert [L.stage_lead_bytes(int(n), SLOT) + L.STAGE_HDR_BYTES for n in sizes] == \
        [16, 16, 128, 128]
    hdr = qs.stage.host[0]
    flags = hdr[(got[:, 2] - 4) + L.STAGE_W_INDEX_FLAGS] >> 16
    assert list(flags) == [0, 0, L.STAGE_F_ALIGNED, L.STAGE_F_ALIGNED]


@pytest.mark.parametrize("credits", ["status", "completions"])
def test_engine_publishes_staging_credits_only_in_status_mode(nic, credits):
    """With credits from completions, as on a real NIC, the status line carries none."""
    pd = nic.alloc_pd()
    dst = np.zeros(4096, dtype=np.uint8)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16, stage_slots=8, stage_slot_bytes=SLOT,
                          stage_credits=credits)
    c, data = _push(nic, qs, dmr, 0, 0, 64)
    assert c.ok
    assert np.array_equal(dst[:64].view(np.uint32), data)
    published = int(qs.status.host[0, L.STATUS_W_STAGE_FREED])
    assert published == (1 if credits == "status" else 0)
    assert int(qs.info_host[0, dv.I_STAGE_CQE]) == (credits == "completions")


def test_gpu_push_with_staging_credits_from_completions_delivers_every_byte():
    """A small ring makes every QP wait for credits many times; the engine publishes none,
    so each wait is answered by the completion of an earlier push."""
    from gpuwrite.paths import runner
    sizes = np.minimum(runner.default_sizes("gpu_push", 36, seed=4), 1024)
    r = runner.run("gpu_push", sizes, n_qps=2, batch=4, stage_slots=16, stage_slot_bytes=SLOT,
                   stage_credits="completions")
    assert r.qp_errors == {}
    assert r.delivered == r.messages == len(sizes)


def test_pushed_wqes_ask_for_completions_often_enough_for_the_ring():
    """Batches of 12 one-slot messages on a 16-slot ring: a completion every 12 messages
    would leave the GPU waiting for credits nobody returns, so stage_signal asks for one
    once a quarter of the ring (4 slots) is claimed; never for every message."""
    from gpuwrite.paths import runner
    n = 36
    r = runner.run("gpu_push", [64] * n, n_qps=2, batch=12, stage_slots=16, stage_slot_bytes=SLOT,
                   stage_credits="completions")
    assert r.delivered == n and r.qp_errors == {}
    assert n // 12 < r.counters["cqes"] < n


def test_stage_credits_must_be_named():
    from gpuwrite.paths import runner
    with pytest.raises(ValueError, match="stage_credits='cqe'"):
        runner.run("gpu_push", [64], n_qps=1, stage_credits="cqe")
