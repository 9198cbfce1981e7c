"""A device wait on a stopped engine returns a timeout error instead of hanging."""
import numpy as np

from gpuwrite.cudaenv import cuda
from gpuwrite.device import verbs as dv
from gpuwrite.host.verbs import Context
from gpuwrite.paths import kernels as K


def test_wait_on_a_stopped_engine_times_out_with_a_named_error():
    with Context() as ctx:           # never started: nothing will ever complete
        pd = ctx.alloc_pd()
        qs = pd.create_queues(1, sq_bbs=16, ncqe=16)

        @cuda.jit
        def post_and_wait(Q, out):
            if cuda.threadIdx.x == 0:
                dv.wqe_rdma_write(Q, 0, 0, 0, 0, 0, 0, True, 0)
                dv.ring_doorbell(Q, 0)
                out[0] = dv.wait_done(Q, 0, Q[dv.Q_STATE][0, dv.S_PI], 200_000_000)

        out = cuda.to_device(np.zeros(1, dtype=np.int64))
        post_and_wait[1, 1](qs.device_args, out)
        cuda.synchronize()
        code = int(out.copy_to_host()[0])
    assert code == dv.E_TIMEOUT_CQE
    assert "completion" in dv.ERROR_NAMES[code]


def test_staging_credit_wait_times_out_when_the_nic_returns_none():
    with Context() as ctx:
        qs = ctx.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16, stage_slots=2,
                                          stage_slot_bytes=64)

        @cuda.jit
        def reserve_twice(Q, out):
            if cuda.threadIdx.x == 0:
                st, first, total = dv.stage_reserve(Q, 0, 100, 100_000_000)
                out[0] = st
                st, first, total = dv.stage_reserve(Q, 0, 100, 100_000_000)
                out[1] = st

        out = cuda.to_device(np.zeros(2, dtype=np.int64))
        reserve_twice[1, 1](qs.device_args, out)
        cuda.synchronize()
        got = out.copy_to_host()
    assert got[0] == dv.OK and got[1] == dv.E_TIMEOUT_STAGING
    assert K.PATH_IDS["gpu_push"] == K.PUSH
