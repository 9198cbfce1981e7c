"""Every data path delivers every byte, in order per QP, on the simulator and on a GPU."""
import numpy as np
import pytest

from gwtest import ACCESS_RW, small
from gpuwrite.host.wqe import HostPoster, rdma_write
from gpuwrite.paths import runner


@pytest.mark.parametrize("path", runner.PATHS)
def test_every_path_delivers_every_byte(path):
    n = small(2000, 48)
    sizes = runner.default_sizes(path, n, seed=3)
    r = runner.run(path, sizes, n_qps=3, batch=4, chunk_bytes=8192, seed=11)
    assert r.qp_errors == {}
    assert r.delivered == r.messages == n
    assert r.bytes == int(np.sum(sizes))
    assert r.errors == 0 and r.dropped == 0
    assert r.counters["msgs_delivered"] >= n         # chunked messages are several WQEs
    assert r.counters["bytes_delivered"] == int(np.sum(sizes))
    # every completion has the engine's turnaround (doorbell seen to CQE written) counted
    assert r.counters["turnarounds"] == r.counters["cqes"] > 0
    assert r.counters["turnaround_ns"] > 0


@pytest.mark.parametrize("path", runner.PATHS)
def test_completions_arrive_in_posting_order_per_qp(path):
    n = small(400, 24)
    r = runner.run(path, runner.default_sizes(path, n, seed=5), n_qps=2, batch=1, wait_each=True)
    assert r.delivered == n
    assert np.all(r.latencies_ns > 0)


@pytest.mark.parametrize("path", ["gpu_push", "nic_pull"])
@pytest.mark.parametrize("batch", [1, 4])
def test_the_last_wqe_of_every_batch_asks_for_a_completion(path, batch):
    """One CQE per batch per QP, whichever thread of the block writes the flags word."""
    per_qp = 12
    r = runner.run(path, [64] * (2 * per_qp), n_qps=2, batch=batch, block_threads=8)
    assert r.delivered == r.messages
    assert r.counters["cqes"] == 2 * per_qp // batch


def test_engine_delivers_a_prefix_in_order(nic):
    """Polled one pass at a time, delivered messages always form a prefix of those posted."""
    pd = nic.alloc_pd()
    src = np.arange(64 * 40, dtype=np.uint32).view(np.uint8)
    dst = np.zeros_like(src)
    smr, dmr = pd.reg_mr(src), pd.reg_mr(dst, access=ACCESS_RW)
    qs = pd.create_queues(1, sq_bbs=64, ncqe=64)
    p = HostPoster(qs)
    for k in range(40):
        p.write(rdma_write(p.pi, p.qpn, smr.address + 64 * k, smr.lkey, 64,
                           dmr.address + 64 * k, dmr.rkey, signaled=True))
    p.ring()
    seen = []
    while len(seen) < 40:
        nic.poll(1)
        done = [k for k in range(40) if np.array_equal(dst[64 * k:64 * k + 64],
                                                       src[64 * k:64 * k + 64])]
        assert done == list(range(len(done)))
        while (c := p.poll()) is not None:
            assert c.ok
            seen.append(c.wqe_counter)
    assert seen == list(range(40))


def test_a_poll_delay_changes_when_completions_are_polled_not_what_arrives():
    r = runner.run("gpu_push", [64, 256, 4096], n_qps=1, wait_each=True, poll_delay_ns=2000)
    assert r.delivered == r.messages == 3 and r.qp_errors == {}
    assert np.all(r.latencies_ns >= 2000)     # every wait let the pause pass first


def test_poll_delay_is_checked():
    with pytest.raises(ValueError, match="poll_delay_ns=-1: allowed 0 to 100000"):
        runner.run("gpu_push", [64], poll_delay_ns=-1)
