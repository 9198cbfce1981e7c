"""Testbed queue memory driven by the unchanged device verbs (simulator or GPU).

No NIC here: the ring and doorbell "UMEMs" are pinned host buffers laid out by RingPlan exactly
as TestbedQueueSet registers them, and the doorbell "register" is a host word viewed with
stride 0. The kernel writes a WQE, rings the doorbell and polls a CQE that rdma-core's
mlx5dv.h structures built: the bytes must land where an mlx5 NIC reads them.
"""
import numpy as np
import pytest

from gpuwrite import layouts as L
from gpuwrite.backends.testbed.devx import RingPlan, doorbell_view
from gpuwrite.cudaenv import cuda
from gpuwrite.device import verbs as dv
from gpuwrite.host.memory import device_zeros, mapped
from tbref import compile_reference

REF = r"""
#include <infiniband/mlx5dv.h>
#include <endian.h>
#include <string.h>
void ref_rdma_write(uint8_t *out, uint16_t pi, uint32_t qpn, uint64_t raddr, uint32_t rkey,
                    uint64_t laddr, uint32_t lkey, uint32_t len)
{
    memset(out, 0, 64);
    mlx5dv_set_ctrl_seg((void *)out, pi, MLX5_OPCODE_RDMA_WRITE, 0, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
    struct mlx5_wqe_raddr_seg *ra = (void *)(out + 16);
    ra->raddr = htobe64(raddr);
    ra->rkey = htobe32(rkey);
    mlx5dv_set_data_seg((void *)(out + 32), len, lkey, laddr);
}
void ref_retry_exceeded(uint8_t *out, uint16_t wqe_counter, uint32_t qpn)
{
    struct mlx5_err_cqe *cqe = (void *)out;
    memset(out, 0, 64);
    cqe->syndrome = MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR;
    cqe->vendor_err_synd = 0x81;
    cqe->s_wqe_opcode_qpn = htobe32((uint32_t)MLX5_OPCODE_RDMA_WRITE << 24 | qpn);
    cqe->wqe_counter = htobe16(wqe_counter);
    cqe->op_own = MLX5_CQE_REQ_ERR << 4;
}
"""
CDEF = """
void ref_rdma_write(uint8_t *out, uint16_t pi, uint32_t qpn, uint64_t raddr, uint32_t rkey,
                    uint64_t laddr, uint32_t lkey, uint32_t len);
void ref_retry_exceeded(uint8_t *out, uint16_t wqe_counter, uint32_t qpn);
"""
N_QPS, SQ_BBS, NCQE = 3, 64, 64
QPNS = (0x1C01, 0x1C02, 0x1C03)


@cuda.jit
def post_ring_poll(Q, i, laddr, lkey, nbytes, raddr, rkey, out):
    dv.wqe_rdma_write(Q, i, laddr, lkey, nbytes, raddr, rkey, True, 0)
    dv.ring_doorbell(Q, i)
    out[0] = dv.poll_cq(Q, i)


@pytest.fixture(scope="module")
def ref():
    return compile_reference("_gw_ref_testbed", CDEF, REF)


def test_ring_plan_validates_and_places_queues_on_pages():
    plan = RingPlan(N_QPS, SQ_BBS, NCQE)
    assert [plan.sq_offset(i) for i in range(3)] == [0, 4096, 8192]
    assert plan.cq_offset(0) == 3 * 4096 and plan.ring_bytes == 6 * 4096
    assert (plan.qp_dbr_offset(2), plan.cq_dbr_offset(0)) == (16, 24) and plan.dbr_bytes == 4096
    with pytest.raises(ValueError, match="sq_bbs=32: a power of two from 64"):
        RingPlan(1, 32, 64)
    with pytest.raises(ValueError, match="ncqe=64 must be at least sq_bbs=128"):
        RingPlan(1, 128, 64)


def test_device_verbs_write_where_an_mlx5_nic_reads(ref):
    plan = RingPlan(N_QPS, SQ_BBS, NCQE)
    # Pinned host memory mapped into the GPU (one address on both sides), so that the
    # same test runs on the simulator and on a real GPU.
    ring_mem = mapped((plan.ring_bytes // 4,), np.uint32)
    dbr_mem = mapped((plan.dbr_bytes // 4,), np.uint32)
    doorbell_mem = mapped((2,), np.uint64)         # the register, and a guard word after it
    ring, dbr, doorbell = ring_mem.host, dbr_mem.host, doorbell_mem.host
    ring[:] = plan.initial_rings()
    views = plan.device_arrays(ring_mem.address, dbr_mem.address)
    info = np.zeros((N_QPS, dv.I_COLS), dtype=np.int64)
    info[:, dv.I_QPN] = QPNS
    info[:, dv.I_SQ_BBS] = SQ_BBS
    info[:, dv.I_NCQE] = NCQE
    info[:, dv.I_LOG_NCQE] = plan.log_cq_size
    state = device_zeros((N_QPS, dv.S_COLS), np.int64)
    Q = (views["sq"], views["dbrec"], doorbell_view(doorbell_mem.address, N_QPS),
         device_zeros((N_QPS, L.STATUS_WORDS), np.uint32), views["cq"], views["cqdb"],
         device_zeros((N_QPS, 64), np.uint32), state, cuda.to_device(info),
         device_zeros((N_QPS, SQ_BBS), np.int64), device_zeros((N_QPS, 64), np.uint32))
    # QP 1 has completed 5 WQEs already: its producer index and CQ consumer index moved on.
    host_state = state.copy_to_host()
    host_state[1, dv.S_PI] = host_state[1, dv.S_DB_PI] = host_state[1, dv.S_DONE] = 5
    state.copy_to_device(host_state)
    # The NIC's answer to the WQE about to be posted at index 5: retry exceeded.
    cqe = ref.ffi.new("uint8_t[64]")
    ref.lib.ref_retry_exceeded(cqe, 5, QPNS[1])
    ring.view(np.uint8)[plan.cq_offset(1):plan.cq_offset(1) + 64] = np.frombuffer(ref.ffi.buffer(cqe), np.uint8)

    out = cuda.to_device(np.zeros(1, dtype=np.int64))
    post_ring_poll[1, 1](Q, 1, 0x7F00AA000040, 0x5601, 4096, 0x7F0000001000, 0x1234, out)
    cuda.synchronize()

    wqe = ref.ffi.new("uint8_t[64]")
    ref.lib.ref_rdma_write(wqe, 5, QPNS[1], 0x7F0000001000, 0x1234, 0x7F00AA000040, 0x5601, 4096)
    at = plan.sq_offset(1) + 5 * L.WQE_BB
    assert ring.view(np.uint8)[at:at + 64].tobytes() == bytes(ref.ffi.buffer(wqe))
    assert not ring.view(np.uint8)[:plan.sq_offset(1)].any()           # QP 0's queue untouched
    # Doorbell record: big-endian send counter at dbrec[MLX5_SND_DBR] of QP 1.
    assert dbr.view(">u4")[plan.qp_dbr_offset(1) // 4 + 1] == 6
    # The 8-byte doorbell: the WQE's first 8 bytes, into the one shared register.
    assert doorbell[0].tobytes() == bytes(ref.ffi.buffer(wqe))[:8] and doorbell[1] == 0
    # The error completion is an error the kernel sees, with its syndrome.
    assert out.copy_to_host()[0] == dv.E_CQE_ERROR
    synd = int(state.copy_to_host()[1, dv.S_LAST_SYND])
    assert L.syndrome_name(synd >> 8) == "transport_retry_exc_err" and synd & 0xFF == 0x81
    # CQ consumer index: big-endian set_ci in QP 1's CQ doorbell record.
    assert dbr.view(">u4")[plan.cq_dbr_offset(1) // 4] == 1
