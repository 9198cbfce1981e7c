"""The NIC writes only inside registered regions; every bad WQE is an error CQE."""
import numpy as np
import pytest

from gwtest import ACCESS_RW, canaried
from gpuwrite import layouts as L
from gpuwrite.host.wqe import HostPoster, ctrl_seg, rdma_write


@pytest.fixture
def setup(nic):
    pd = nic.alloc_pd()
    src = np.arange(512, dtype=np.uint8)
    whole, dst, guard = canaried(1024)
    smr = pd.reg_mr(src)
    dmr = pd.reg_mr(dst, access=ACCESS_RW)
    ro_whole, ro, _ = canaried(1024)
    romr = pd.reg_mr(ro, access=L.ACCESS_LOCAL_WRITE)      # no remote write
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    return nic, HostPoster(qs), qs, smr, dmr, romr, whole, ro_whole


def _one(nic, p, wqe_bytes):
    p.write(wqe_bytes)
    p.ring()
    nic.poll(4)
    c = p.poll()
    assert c is not None, "the engine wrote no completion"
    return c


def _untouched(*bufs):
    return all(np.all(b == 0xA5) for b in bufs)


CASES = {
    "bad_rkey": lambda p, s, d, r: rdma_write(p.pi, p.qpn, s.address, s.lkey, 64, d.address,
                                              d.rkey ^ 0x55),
    "remote_bounds": lambda p, s, d, r: rdma_write(p.pi, p.qpn, s.address, s.lkey, 128,
                                                   d.address + 1000, d.rkey),
    "remote_access": lambda p, s, d, r: rdma_write(p.pi, p.qpn, s.address, s.lkey, 64, r.address,
                                                   r.rkey),
    "bad_lkey": lambda p, s, d, r: rdma_write(p.pi, p.qpn, s.address, s.lkey + 0x100, 64,
                                              d.address, d.rkey),
    "local_bounds": lambda p, s, d, r: rdma_write(p.pi, p.qpn, s.address + 500, s.lkey, 64,
                                                  d.address, d.rkey),
    "bad_opcode": lambda p, s, d, r: ctrl_seg(0x1F, p.pi, p.qpn, 1).tobytes() + bytes(48),
    "bad_qpn": lambda p, s, d, r: rdma_write(p.pi, p.qpn + 1, s.address, s.lkey, 64, d.address,
                                             d.rkey),
    "bad_ds": lambda p, s, d, r: ctrl_seg(L.OPCODE_RDMA_WRITE, p.pi, p.qpn, 0).tobytes() + bytes(48),
    "unsupported": lambda p, s, d, r: ctrl_seg(L.OPCODE_SEND, p.pi, p.qpn, 3).tobytes() + bytes(48),
}
SYNDROMES = {
    "bad_rkey": "remote_access_err", "remote_bounds": "remote_access_err",
    "remote_access": "remote_access_err", "bad_lkey": "local_prot_err",
    "local_bounds": "local_prot_err", "bad_opcode": "local_qp_op_err", "bad_qpn": "local_qp_op_err",
    "bad_ds": "local_qp_op_err", "unsupported": "local_qp_op_err",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_wqe_gives_error_cqe_and_writes_nothing(setup, case):
    nic, p, qs, smr, dmr, romr, whole, ro_whole = setup
    c = _one(nic, p, CASES[case](p, smr, dmr, romr))
    assert not c.ok
    assert L.reason_name(c.reason) == case
    assert L.syndrome_name(c.syndrome) == SYNDROMES[case]
    assert _untouched(whole, ro_whole), "a byte changed after a failed WQE"
    assert qs.qp_state(0) == "error"
    assert nic.counters()["error_cqes"] == 1


def test_after_an_error_later_wqes_are_flushed_then_reset_recovers(setup):
    nic, p, qs, smr, dmr, romr, whole, _ = setup
    p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey ^ 1))
    p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey,
                       signaled=False))
    p.ring()
    nic.poll(8)
    first, second = p.poll(), p.poll()
    assert L.reason_name(first.reason) == "bad_rkey"
    assert L.syndrome_name(second.syndrome) == "wr_flush_err"   # unsignaled, still reported
    assert _untouched(whole)
    qs.reset(0)
    p.reset()
    c = _one(nic, p, rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey))
    assert c.ok and qs.qp_state(0) == "rts"
    assert np.array_equal(whole[256:320], np.arange(64, dtype=np.uint8))


@pytest.mark.parametrize("later", ["bad_rkey", "remote_bounds", "bad_lkey", "bad_opcode"])
def test_behind_a_failure_a_bad_wqe_is_flushed_too(setup, later):
    """A NIC whose QP is in error executes nothing more: a later work request completes
    flushed whatever its own fault would have been (the engine checked its keys when it
    fetched it, before the first failure retired; session 48)."""
    nic, p, qs, smr, dmr, romr, whole, ro_whole = setup
    p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey ^ 1))
    p.write(CASES[later](p, smr, dmr, romr))
    p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey))
    p.ring()
    nic.poll(8)
    got = [p.poll() for _ in range(3)]
    assert [L.reason_name(c.reason) for c in got] == ["bad_rkey", "flushed", "flushed"]
    assert [L.syndrome_name(c.syndrome) for c in got[1:]] == ["wr_flush_err"] * 2
    assert nic.counters()["flushed_wqes"] == 2
    assert _untouched(whole, ro_whole)


def test_ring_overflow_is_an_error_completion(setup):
    nic, p, qs, smr, dmr, romr, whole, _ = setup
    for _ in range(17):                          # one more than the 16-BB ring holds
        p.write(rdma_write(p.pi, p.qpn, smr.address, smr.lkey, 64, dmr.address, dmr.rkey))
    p.ring()
    nic.poll(4)
    c = p.poll()
    assert not c.ok and L.reason_name(c.reason) == "ring_overflow"
    assert nic.counters()["ring_overflows"] == 1
    assert _untouched(whole)


def test_error_messages_name_the_value():
    from gpuwrite.host.verbs import Context, LinkConfig
    with pytest.raises(ValueError, match="policy='lossy'"):
        Context(policy="lossy")
    with pytest.raises(ValueError, match="mtu_bytes=1000"):
        LinkConfig(rate_gbps=100, mtu_bytes=1000)
    with Context() as ctx:
        with pytest.raises(ValueError, match="sq_bbs=100"):
            ctx.alloc_pd().create_queues(1, sq_bbs=100)
