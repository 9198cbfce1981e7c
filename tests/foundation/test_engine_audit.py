"""Engine bugs found by the sanitizer audit (scripts/sanitize_check.sh, which also runs
adversary.py, the adversarial driver), one test each; each failed before its fix. All
drive the engine from the host in this thread (``Context.poll``): no kernel, exact
outcomes.
"""
import numpy as np
import pytest

from gwtest import ACCESS_RW
from gpuwrite import layouts as L
from gpuwrite.host.verbs import Context, LinkConfig
from gpuwrite.host.wqe import HostPoster, rdma_write

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
