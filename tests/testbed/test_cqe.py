"""CQE bytes and syndromes against rdma-core's mlx5dv.h (struct mlx5_cqe64, mlx5_err_cqe)."""
import pytest

from gpuwrite import layouts as L
from tbref import compile_reference, mlx5dv_enum_names

SOURCE = r"""
#include <infiniband/mlx5dv.h>
#include <endian.h>
#include <string.h>
void ref_req_cqe(uint8_t *out, uint16_t wqe_counter, uint32_t qpn, uint32_t byte_cnt, int owner)
{
    struct mlx5_cqe64 *cqe = (void *)out;
    memset(out, 0, 64);
    cqe->byte_cnt = htobe32(byte_cnt);
    cqe->sop_drop_qpn = htobe32(qpn & 0xffffff);
    cqe->wqe_counter = htobe16(wqe_counter);
    cqe->op_own = (MLX5_CQE_REQ << 4) | (owner & 1);
}
void ref_err_cqe(uint8_t *out, uint16_t wqe_counter, uint32_t qpn, uint8_t syndrome,
                 uint8_t vendor, uint8_t wqe_opcode, int owner)
{
    struct mlx5_err_cqe *cqe = (void *)out;
    memset(out, 0, 64);
    cqe->syndrome = syndrome;
    cqe->vendor_err_synd = vendor;
    cqe->s_wqe_opcode_qpn = htobe32((uint32_t)wqe_opcode << 24 | (qpn & 0xffffff));
    cqe->wqe_counter = htobe16(wqe_counter);
    cqe->op_own = (MLX5_CQE_REQ_ERR << 4) | (owner & 1);
}
int ref_value(int which) { return REF_VALUES[which]; }
"""
CDEF = """
void ref_req_cqe(uint8_t *out, uint16_t wqe_counter, uint32_t qpn, uint32_t byte_cnt, int owner);
void ref_err_cqe(uint8_t *out, uint16_t wqe_counter, uint32_t qpn, uint8_t syndrome,
                 uint8_t vendor, uint8_t wqe_opcode, int owner);
int ref_value(int which);
"""
SYNDROME_PREFIX = "MLX5_CQE_SYNDROME_"
CQE_OPCODES = ("MLX5_CQE_REQ", "MLX5_CQE_RESP_WR_IMM", "MLX5_CQE_REQ_ERR", "MLX5_CQE_RESP_ERR",
               "MLX5_CQE_INVALID")


@pytest.fixture(scope="module")
def ref():
    names = mlx5dv_enum_names(SYNDROME_PREFIX) + list(CQE_OPCODES)
    values = "static const int REF_VALUES[] = {" + ", ".join(names) + "};\n"
    source = SOURCE.replace("int ref_value", values + "int ref_value")
    module = compile_reference("_gw_ref_cqe", CDEF, source)
    return module, {name: module.lib.ref_value(k) for k, name in enumerate(names)}


def test_every_mlx5_syndrome_is_named_with_its_value(ref):
    _, values = ref
    theirs = {name[len(SYNDROME_PREFIX):].lower(): v for name, v in values.items()
              if name.startswith(SYNDROME_PREFIX)}
    assert theirs == L.SYNDROME
    assert L.SYNDROME["transport_retry_exc_err"] == 0x15
    assert L.SYNDROME["wr_flush_err"] == 0x05


def test_cqe_opcodes_match_mlx5(ref):
    _, values = ref
    for name in CQE_OPCODES:
        assert L.CQE_OPCODES[values[name]] == name[len("MLX5_CQE_"):].lower()


@pytest.mark.parametrize("counter,qpn,nbytes,owner", [(0, 0x100, 64, 0), (0xFFFF, 0xFFFFFF, 1 << 30, 1),
                                                       (513, 0x42, 4096, 1)])
def test_success_cqe_decodes(ref, counter, qpn, nbytes, owner):
    module, _ = ref
    buf = module.ffi.new("uint8_t[64]")
    module.lib.ref_req_cqe(buf, counter, qpn, nbytes, owner)
    got = L.decode_cqe(module.ffi.buffer(buf), emulated=False)
    assert got == {"opcode": "req", "owner": owner, "wqe_counter": counter, "error": False,
                   "qpn": qpn, "byte_cnt": nbytes}


@pytest.mark.parametrize("name", sorted(L.SYNDROME))
def test_error_cqe_decodes_to_its_named_syndrome(ref, name):
    module, _ = ref
    buf = module.ffi.new("uint8_t[64]")
    module.lib.ref_err_cqe(buf, 0x1234, 0xABCDE, L.SYNDROME[name], 0x81, L.OPCODE_RDMA_WRITE, 1)
    got = L.decode_cqe(module.ffi.buffer(buf), emulated=False)
    assert got["error"] and got["opcode"] == "req_err"
    assert (got["syndrome"], got["syndrome_code"]) == (name, L.SYNDROME[name])
    assert (got["qpn"], got["wqe_counter"], got["wqe_opcode"]) == (0xABCDE, 0x1234, 0x08)
    assert got["vendor_err_synd"] == 0x81 and "reason" not in got


def test_device_poll_reads_the_syndrome_where_mlx5_puts_it(ref):
    """The device verbs read one little-endian word at CQE_W_SYNDROME: syndrome in its
    top byte, vendor syndrome below (see verbs.poll_cq)."""
    import numpy as np

    module, _ = ref
    buf = module.ffi.new("uint8_t[64]")
    module.lib.ref_err_cqe(buf, 7, 0x100, L.SYNDROME["transport_retry_exc_err"], 0x13, 8, 0)
    word = int(np.frombuffer(module.ffi.buffer(buf), dtype="<u4")[L.CQE_W_SYNDROME])
    assert word >> 24 == 0x15 and (word >> 16) & 0xFF == 0x13
