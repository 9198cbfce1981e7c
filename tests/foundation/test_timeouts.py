"""Every device wait gives up after its timeout with an error naming what it waited for,
and no sooner; a wait on a QP the NIC has failed stops at once.

The waits run against an engine that is never started (or a NIC status line the test
writes), so nothing will ever answer them: what is measured is the wait itself. Each test
has a pytest time limit of a few times its need, so a wait that never gives up fails the
test in seconds rather than hanging the suite.
"""
import numpy as np
import pytest

from gpuwrite import layouts as L
from gpuwrite.cudaenv import cuda
from gpuwrite.device import verbs as dv
from gpuwrite.device.intrinsics import globaltimer_ns

TIMEOUT_NS = 200_000_000           # each wait's own limit
LATE_NS = 5_000_000_000            # a wait that returns this much later has not timed out


def check_timed_out(got, code):
    status, elapsed_ns = int(got[0]), int(got[1])
    assert status == code, f"status {dv.ERROR_NAMES.get(status, status)}"
    assert TIMEOUT_NS <= elapsed_ns < TIMEOUT_NS + LATE_NS, f"gave up after {elapsed_ns} ns"


@cuda.jit
def _post_and_wait(Q, out):
    if cuda.threadIdx.x == 0:
        dv.wqe_rdma_write(Q, 0, 0, 0, 0, 0, 0, True, 0)
        dv.ring_doorbell(Q, 0)
        start = globaltimer_ns()
        out[0] = dv.wait_done(Q, 0, Q[dv.Q_STATE][0, dv.S_PI], TIMEOUT_NS)
        out[1] = globaltimer_ns() - start


@pytest.mark.timeout(20)
def test_a_completion_wait_on_a_stopped_engine_times_out_with_a_named_error(nic):
    qs = nic.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16)   # never started
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    _post_and_wait[1, 1](qs.device_args, out)
    cuda.synchronize()
    check_timed_out(out.copy_to_host(), dv.E_TIMEOUT_CQE)
    assert "completion" in dv.ERROR_NAMES[dv.E_TIMEOUT_CQE]
    # The WQE was published (the doorbell record says so) but nobody completed it.
    assert int(qs.dbrec.host[0, L.QP_DBREC_W_SEND]) == int.from_bytes((1).to_bytes(4, "big"),
                                                                      "little")


@cuda.jit
def _fill_sq_then_reserve(Q, n_bbs, out):
    if cuda.threadIdx.x == 0:
        for _ in range(n_bbs):
            dv.wqe_rdma_write(Q, 0, 0, 0, 0, 0, 0, False, 0)
        start = globaltimer_ns()
        out[0] = dv.sq_reserve(Q, 0, 1, TIMEOUT_NS)
        out[1] = globaltimer_ns() - start
        out[2] = Q[dv.Q_STATE][0, dv.S_PI]


@pytest.mark.timeout(20)
def test_a_full_send_queue_times_out_waiting_for_space(nic):
    """16 BBs written on a 16-BB send queue: the 17th must wait for a completion."""
    qs = nic.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16)
    out = cuda.to_device(np.zeros(3, dtype=np.int64))
    _fill_sq_then_reserve[1, 1](qs.device_args, 16, out)
    cuda.synchronize()
    got = out.copy_to_host()
    check_timed_out(got, dv.E_TIMEOUT_SQ)
    assert got[2] == 16


@cuda.jit
def _reserve_twice(Q, nbytes, out):
    if cuda.threadIdx.x == 0:
        out[0], first, total = dv.stage_reserve(Q, 0, nbytes, TIMEOUT_NS)
        start = globaltimer_ns()
        out[1], first, total = dv.stage_reserve(Q, 0, nbytes, TIMEOUT_NS)
        out[2] = globaltimer_ns() - start


@pytest.mark.timeout(20)
@pytest.mark.parametrize("credits", ["status", "completions"])
def test_a_staging_credit_wait_times_out_when_the_nic_returns_none(nic, credits):
    qs = nic.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16, stage_slots=4, stage_slot_bytes=64,
                                      stage_credits=credits)
    out = cuda.to_device(np.zeros(3, dtype=np.int64))
    _reserve_twice[1, 1](qs.device_args, 150, out)     # 150 bytes + header: 3 of the 4 slots
    cuda.synchronize()
    got = out.copy_to_host()
    assert got[0] == dv.OK
    check_timed_out(got[1:], dv.E_TIMEOUT_STAGING)


@pytest.mark.timeout(20)
def test_a_staging_credit_wait_stops_at_once_when_the_qp_is_in_error(nic):
    # Credits from the status line: the wait polls it and reads the QP's state there.
    # (With credits from completions the engine flushes the WQEs a wait needs, and their
    # error completions end it: test_safety.)
    qs = nic.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16, stage_slots=4, stage_slot_bytes=64,
                                      stage_credits="status")
    qs.status.host[0, L.STATUS_W_QP_STATE] = L.QPS_ERR      # as the NIC publishes it
    out = cuda.to_device(np.zeros(3, dtype=np.int64))
    _reserve_twice[1, 1](qs.device_args, 150, out)
    cuda.synchronize()
    got = out.copy_to_host()
    assert got[0] == dv.OK
    assert got[1] == dv.E_QP_ERROR, dv.ERROR_NAMES.get(int(got[1]), got[1])
    assert got[2] < TIMEOUT_NS, "the wait ran into its timeout instead of seeing the error"


@cuda.jit
def _bounce_twice(Q, nwords, out):
    if cuda.threadIdx.x == 0:
        out[0], word = dv.bounce_reserve(Q, 0, nwords, TIMEOUT_NS)
        start = globaltimer_ns()
        out[1], word = dv.bounce_reserve(Q, 0, nwords, TIMEOUT_NS)
        out[2] = globaltimer_ns() - start


@pytest.mark.timeout(20)
def test_a_bounce_ring_wait_times_out_when_nothing_completes(nic):
    qs = nic.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16, bounce_bytes=256)
    out = cuda.to_device(np.zeros(3, dtype=np.int64))
    _bounce_twice[1, 1](qs.device_args, 48, out)      # 48 of the ring's 64 words, twice
    cuda.synchronize()
    got = out.copy_to_host()
    assert got[0] == dv.OK
    check_timed_out(got[1:], dv.E_TIMEOUT_BOUNCE)    # its own code, not the send queue's
