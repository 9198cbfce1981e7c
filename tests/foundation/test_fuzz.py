"""Random WQE bytes never crash the engine nor write outside registered memory."""
import numpy as np

from gwtest import ACCESS_RW, canaried
from gpuwrite import layouts as L
from gpuwrite.host.wqe import HostPoster, rdma_write


def test_random_wqes_each_complete_or_fail_and_the_engine_keeps_going(nic):
    rng = np.random.default_rng(2026)
    pd = nic.alloc_pd()
    src = np.arange(4096, dtype=np.uint32).view(np.uint8)
    whole, dst, guard = canaried(4096)
    smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=16, ncqe=16)
    p = HostPoster(qs)
    outcomes = {"ok": 0, "error": 0}
    for k in range(3000):
        raw = bytearray(rng.integers(0, 256, size=64, dtype=np.uint8).tobytes())
        # Keep the index and QP number valid half of the time so deeper checks are reached,
        # and point some at real keys so that valid writes happen too.
        if k % 2 == 0:
            raw[0:16] = bytes(16)
            good = rdma_write(p.pi, p.qpn, smr.address + int(rng.integers(0, 4096)), smr.lkey,
                              int(rng.integers(0, 512)), dmr.address + int(rng.integers(0, 4096)),
                              dmr.rkey, signaled=bool(rng.integers(0, 2)))
            raw = bytearray(good)
            flip = int(rng.integers(0, 64))
            if k % 4 == 0:
                raw[flip] ^= 1 << int(rng.integers(0, 8))
        p.write(bytes(raw))
        p.ring()
        nic.poll(3)
        c = p.poll()
        if c is None:
            # Unsignaled success produces no CQE; anything else must have completed.
            assert qs.qp_state(0) == "rts"
            p_done = int(qs.status.host[0, L.STATUS_W_SQ_CONSUMED])
            assert p_done == p.pi & 0xFFFF
            outcomes["ok"] += 1
            continue
        if c.ok:
            outcomes["ok"] += 1
        else:
            outcomes["error"] += 1
            assert c.reason != 0
            qs.reset(0)
            p.reset()
    assert outcomes["ok"] > 100 and outcomes["error"] > 100
    assert np.all(whole[:guard] == 0xA5) and np.all(whole[guard + 4096:] == 0xA5)
    assert nic.counters()["wqes"] >= 3000
