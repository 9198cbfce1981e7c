"""Byte layouts: sizes from the header, and WQE bytes equal to rdma-core's mlx5dv helpers."""
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest
from sm90ptx import compile_sm90

from gpuwrite import layouts as L
from gpuwrite.host import wqe


def test_mlx5_sizes_and_offsets():
    assert L.CTRL_SEG.itemsize == 16 and L.RADDR_SEG.itemsize == 16 and L.DATA_SEG.itemsize == 16
    assert L.CQE64.itemsize == 64 and L.ERR_CQE.itemsize == 64
    assert L.CTRL_SEG.fields["fm_ce_se"][1] == 11          # mlx5 packs it at byte 11
    assert L.CQE64.fields["op_own"][1] == 63
    assert L.CQE64.fields["wqe_counter"][1] == 60
    assert L.ERR_CQE.fields["syndrome"][1] == 55
    assert L.CQE64.fields["byte_cnt"][1] == 44
    assert L.CTRL_SEG.fields["qpn_ds"][0] == np.dtype(">u4")   # big-endian on the wire


def test_opcodes_and_syndromes_match_mlx5():
    assert (L.OPCODE_NOP, L.OPCODE_RDMA_WRITE, L.OPCODE_RDMA_WRITE_IMM, L.OPCODE_SEND) == \
        (0x00, 0x08, 0x09, 0x0A)
    assert L.SYNDROME["remote_access_err"] == 0x13
    assert L.SYNDROME["wr_flush_err"] == 0x05


REFERENCE_C = r"""
#include <infiniband/mlx5dv.h>
#include <endian.h>
#include <string.h>
void ref_rdma_write(uint8_t *out, uint16_t pi, uint32_t qpn, uint64_t raddr, uint32_t rkey,
                    uint64_t laddr, uint32_t lkey, uint32_t len, int signaled)
{
    memset(out, 0, 64);
    struct mlx5_wqe_ctrl_seg *ctrl = (void *)out;
    struct mlx5_wqe_raddr_seg *ra = (void *)(out + 16);
    struct mlx5_wqe_data_seg *ds = (void *)(out + 32);
    mlx5dv_set_ctrl_seg(ctrl, pi, MLX5_OPCODE_RDMA_WRITE, 0, qpn,
                        signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0, 3, 0, 0);
    ra->raddr = htobe64(raddr);
    ra->rkey = htobe32(rkey);
    mlx5dv_set_data_seg(ds, len, lkey, laddr);
}
"""


@pytest.fixture(scope="module")
def mlx5dv_ref():
    if not os.path.exists("/usr/include/infiniband/mlx5dv.h"):
        pytest.skip("rdma-core's mlx5dv.h is not installed (Debian: libibverbs-dev)")
    from cffi import FFI
    ffi = FFI()
    ffi.cdef("void ref_rdma_write(uint8_t *out, uint16_t pi, uint32_t qpn, uint64_t raddr, "
             "uint32_t rkey, uint64_t laddr, uint32_t lkey, uint32_t len, int signaled);")
    ffi.set_source("_gw_mlx5dv_ref", REFERENCE_C)
    tmp = tempfile.mkdtemp()
    path = ffi.compile(tmpdir=tmp)
    sys.path.insert(0, tmp)
    import importlib
    mod = importlib.import_module("_gw_mlx5dv_ref")
    yield mod
    sys.path.remove(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    del path


CASES = [
    (0, 0x100, 0x7F0000001000, 0x1234, 0x7F00AA000040, 0x5601, 64, True),
    (0xFFFF, 0xFFFFFF, 0xFFFFFFFFFFFFFFF0, 0xFFFFFFFF, 1, 0x80000001, 0x7FFFFFFF, False),
    (513, 0x42, 0x123456789ABCDEF0, 0xCAFE01, 0xFEDCBA9876543210, 0xBEEF02, 4096, True),
]


@pytest.mark.parametrize("case", CASES)
def test_host_wqe_bytes_equal_mlx5dv(mlx5dv_ref, case):
    pi, qpn, raddr, rkey, laddr, lkey, length, signaled = case
    ref = mlx5dv_ref.ffi.new("uint8_t[64]")
    mlx5dv_ref.lib.ref_rdma_write(ref, pi, qpn, raddr, rkey, laddr, lkey, length, signaled)
    ours = wqe.rdma_write(pi, qpn, laddr, lkey, length, raddr, rkey, signaled)
    assert ours == bytes(mlx5dv_ref.ffi.buffer(ref))


@pytest.mark.parametrize("case", CASES)
def test_device_wqe_bytes_equal_mlx5dv(mlx5dv_ref, nic, case):
    """The bytes a kernel writes through the device verbs equal rdma-core's."""
    from gpuwrite.cudaenv import cuda
    from gpuwrite.device import verbs as dv

    pi, qpn, raddr, rkey, laddr, lkey, length, signaled = case

    @cuda.jit
    def build(Q, laddr, lkey, length, raddr, rkey, signaled):
        dv.wqe_rdma_write(Q, 0, laddr, lkey, length, raddr, rkey, signaled != 0, 0)

    qs = nic.alloc_pd().create_queues(1, sq_bbs=16, ncqe=16)
    state = qs.gpu_state()
    state[0, dv.S_PI] = pi
    qs.state.copy_to_device(state)
    info = qs.info_host.copy()
    info[0, dv.I_QPN] = qpn
    qs.info.copy_to_device(info)
    build[1, 1](qs.device_args, np.int64(laddr - (1 << 64) if laddr >= 1 << 63 else laddr), lkey,
                length, np.int64(raddr - (1 << 64) if raddr >= 1 << 63 else raddr), rkey,
                int(signaled))
    cuda.synchronize()
    ref = mlx5dv_ref.ffi.new("uint8_t[64]")
    mlx5dv_ref.lib.ref_rdma_write(ref, pi, qpn, raddr, rkey, laddr, lkey, length, signaled)
    pos = (pi % 16) * 64
    assert qs.sq.host[0].view(np.uint8)[pos:pos + 64].tobytes() == bytes(mlx5dv_ref.ffi.buffer(ref))


# Ten kernels through NVVM in a child: about 50 s alone on a 2-core machine, more than the
# foundation tests' default limit allows once the machine is shared (conftest.py).
@pytest.mark.timeout(600)
def test_every_kernel_the_package_launches_compiles_for_sm_90():
    """The simulator does not type-check kernels; this catches what only a GPU would."""
    out = compile_sm90(r"""
from gpuwrite.paths import kernels as K
from gpuwrite.bench import breakdown as B, suite as S
kernels = {
    # what the runners launch: the kernel made for each path (its path a constant)
    **{f"send_messages_for_{p}": (K.send_messages_for(p), SEND) for p in K.PATH_IDS},
    "push_steps": (B._push_steps, (Q, u32[::1], i64, i64, i64, i64, i64[:, ::1], i64[::1])),
    "pingpong": (S._pingpong, (u32[::1], u32[::1], i64, i64[::1], i64, i64)),
    "pingpong_readers": (S._pingpong_readers, (u32[::1], u32[::1], i64, i64[::1], i64, i64)),
    "pingpong_after_push_writes": (S._pingpong_after_push_writes,
                                   (u32[::1], u32[::1], types.uint64[::1], u32[::1], u32[::1],
                                    u32[::1], i64, i64[::1], i64)),
    "pingpong_after_push_stores": (S._pingpong_after_push_stores,
                                   (u32[::1], u32[::1], types.uint64[::1], u32[::1], u32[::1],
                                    i64, i64[::1], i64, i64, i64, i64)),
    "bulk_store": (S._bulk_store, (u32[::1], i64)),
    "gpu_pong": (S._gpu_pong, (u32[::1], u32[::1], i64, i64, i64[::1], u32[::1], u32[::1],
                               i64)),
}
for name, (kernel, sig) in kernels.items():
    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
    print(name, ".entry" in ptx)
""")
    assert out.split() == ["send_messages_for_gpu_push", "True",
                           "send_messages_for_gpu_push_inline", "True",
                           "send_messages_for_nic_pull", "True",
                           "send_messages_for_host_staged", "True",
                           "push_steps", "True", "pingpong", "True", "pingpong_readers", "True",
                           "pingpong_after_push_writes", "True",
                           "pingpong_after_push_stores", "True", "bulk_store", "True",
                           "gpu_pong", "True"]


def test_ptx_of_a_small_push_is_vector_stores_and_no_barrier():
    """push_small writes header, payload and WQE with 16-byte stores, and no block barrier;
    host_staged's staged_small the payload and WQE the same way."""
    push, staged = compile_sm90(r"""
from gpuwrite.device import verbs as dv
def post(Q, src, out):
    out[0] = dv.push_small(Q, 0, src, 0, 64, 4096, 7, True, 1000000)
def post_staged(Q, src, out):
    out[0] = dv.staged_small(Q, 0, src, 0, 64, 4096, 7, 1000000)
for fn in (post, post_staged):
    ptx, _ = cuda.compile_ptx(fn, (Q, u32[::1], types.int64[::1]), cc=(9, 0))
    print(ptx)
    print("=====")
""").split("=====")[:2]
    for ptx, header in ((push, 1), (staged, 0)):
        assert "bar.sync" not in ptx and "barrier" not in ptx
        # header, payload 4, WQE 4 (16-byte stores); the payload read as 16-byte loads
        assert ptx.count("st.global.v4.u32") >= header + 8
        assert ptx.count("ld.global.v4.u32") >= 4


def test_ptx_polls_with_acquire_inside_the_loop_and_rings_with_release():
    """Compile the device verbs for sm_90 (no GPU needed) and read the PTX."""
    code = r"""
from gpuwrite.device import verbs as dv
def wait(Q, out):
    out[0] = dv.wait_done(Q, 0, 5, 1000000)
def ring(Q, out):
    dv.ring_doorbell(Q, 0)
for fn in (wait, ring):
    ptx, _ = cuda.compile_ptx(fn, (Q, types.int64[::1]), cc=(9, 0))
    print("=====", fn.__name__)
    print(ptx)
"""
    stdout = compile_sm90(code)
    wait_ptx, ring_ptx = stdout.split("===== ring")
    lines = wait_ptx.splitlines()
    # Find a backward branch whose loop body holds an acquire load of system scope.
    labels = {l.strip().rstrip(":"): k for k, l in enumerate(lines) if l.strip().endswith(":")}
    in_loop = False
    for k, line in enumerate(lines):
        s = line.strip()
        if s.startswith("@") and " bra" in s or s.startswith("bra"):
            target = s.split()[-1].rstrip(";")
            start = labels.get(target)
            if start is not None and start < k:
                body = lines[start:k]
                if any("ld.acquire.sys" in b for b in body):
                    in_loop = True
    assert in_loop, "no ld.acquire.sys inside a polling loop in wait_done's PTX"
    # Doorbell record (release), then the fence a NIC register needs, then the register.
    release = ring_ptx.index("st.release.sys.global.u32")
    fence = ring_ptx.index("fence.acq_rel.sys")
    register = ring_ptx.index("st.relaxed.sys.global.u64")
    assert release < fence < register
