"""Byte layouts shared by GPU, NIC engine and host, derived from csrc/gw_layouts.h.

Nothing here restates a size or an offset: each numpy dtype is built from cffi's
``sizeof``/``offsetof`` of the C structure, and big-endian fields (declared with the
``gw_be16/32/64`` wrapper types in the header) become big-endian numpy fields. The
constants (opcodes, syndromes, reasons...) are the header's enums.
"""
from __future__ import annotations

import numpy as np

from gpuwrite._gw_cffi import ffi, lib

_BE_TYPES = {"gw_be16": ">u2", "gw_be32": ">u4", "gw_be64": ">u8"}
_NATIVE = {
    "uint8_t": "u1", "uint16_t": "<u2", "uint32_t": "<u4", "uint64_t": "<u8",
    "int32_t": "<i4", "int64_t": "<i8", "double": "<f8",
}


def _field_dtype(ctype) -> np.dtype:
    if ctype.kind == "array":
        return np.dtype((_field_dtype(ctype.item), ctype.length))
    if ctype.kind == "struct":
        if ctype.cname in _BE_TYPES:
            return np.dtype(_BE_TYPES[ctype.cname])
        return struct_dtype(ctype.cname)
    if ctype.kind == "pointer":
        return np.dtype("<u8")
    return np.dtype(_NATIVE[ctype.cname])


def struct_dtype(cname: str) -> np.dtype:
    """The numpy dtype of C ``struct``/typedef ``cname``, laid out as the compiler does."""
    ctype = ffi.typeof(cname)
    names, formats, offsets = [], [], []
    for name, field in ctype.fields:
        names.append(name)
        formats.append(_field_dtype(field.type))
        offsets.append(field.offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                     "itemsize": ffi.sizeof(ctype)})


def offset(cname: str, field: str) -> int:
    """Byte offset of ``field`` in C struct ``cname``."""
    return ffi.offsetof(cname, field)


CTRL_SEG = struct_dtype("struct gw_wqe_ctrl_seg")
RADDR_SEG = struct_dtype("struct gw_wqe_raddr_seg")
DATA_SEG = struct_dtype("struct gw_wqe_data_seg")
INLINE_SEG = struct_dtype("struct gw_wqe_inline_seg")
WQE_RDMA_WRITE = struct_dtype("struct gw_wqe_rdma_write")
CQE64 = struct_dtype("struct gw_cqe64")
ERR_CQE = struct_dtype("struct gw_err_cqe")
QP_DBREC = struct_dtype("struct gw_qp_dbrec")
CQ_DBREC = struct_dtype("struct gw_cq_dbrec")
STAGE_HDR = struct_dtype("struct gw_stage_hdr")
NIC_STATUS = struct_dtype("struct gw_nic_status")
COUNTERS = struct_dtype("struct gw_counters")

# Sizes, from the header's enums.
WQE_BB = lib.GW_SEND_WQE_BB
WQE_DS = lib.GW_SEND_WQE_DS
CQE_SIZE = lib.GW_CQE_SIZE
MAX_WQE_BBS = lib.GW_MAX_WQE_BBS
MAX_INLINE_BYTES = lib.GW_MAX_INLINE_BYTES
INLINE_SEG_FLAG = lib.GW_INLINE_SEG_FLAG
STAGE_HDR_BYTES = lib.GW_STAGE_HDR_BYTES
STAGE_MAGIC = lib.GW_STAGE_MAGIC
STAGE_ALIGN_BYTES = lib.GW_STAGE_ALIGN_BYTES
STAGE_ALIGN_MIN_BYTES = lib.GW_STAGE_ALIGN_MIN_BYTES
STAGE_F_ALIGNED = lib.GW_STAGE_F_ALIGNED


def stage_lead_bytes(nbytes: int, slot_bytes: int) -> int:
    """Bytes before a message's staging header in its first slot (host twin of the
    device verbs' ``stage_lead``): large payloads start on a 128-byte line."""
    aligned = nbytes >= STAGE_ALIGN_MIN_BYTES and slot_bytes >= STAGE_ALIGN_BYTES
    return STAGE_ALIGN_BYTES - STAGE_HDR_BYTES if aligned else 0


def stage_slots_needed(nbytes: int, slot_bytes: int) -> int:
    """Staging slots a message of ``nbytes`` occupies, its header included."""
    return -(-(stage_lead_bytes(nbytes, slot_bytes) + STAGE_HDR_BYTES + nbytes) // slot_bytes)
CREDIT_BLOCK_BYTES = lib.GW_CREDIT_BLOCK_BYTES

OPCODE_NOP = lib.GW_OPCODE_NOP
OPCODE_RDMA_WRITE = lib.GW_OPCODE_RDMA_WRITE
OPCODE_RDMA_WRITE_IMM = lib.GW_OPCODE_RDMA_WRITE_IMM
OPCODE_SEND = lib.GW_OPCODE_SEND
CTRL_CQ_UPDATE = lib.GW_WQE_CTRL_CQ_UPDATE

CQE_REQ = lib.GW_CQE_REQ
CQE_REQ_ERR = lib.GW_CQE_REQ_ERR
CQE_INVALID = lib.GW_CQE_INVALID

ACCESS_LOCAL_WRITE = lib.GW_ACCESS_LOCAL_WRITE
ACCESS_REMOTE_WRITE = lib.GW_ACCESS_REMOTE_WRITE
ACCESS_REMOTE_READ = lib.GW_ACCESS_REMOTE_READ
MEM_HOST = lib.GW_MEM_HOST
MEM_DEVICE = lib.GW_MEM_DEVICE
MEM_STAGING = lib.GW_MEM_STAGING
POLICY_HOLD = lib.GW_POLICY_HOLD
POLICY_DROP = lib.GW_POLICY_DROP
QPS_RTS = lib.GW_QPS_RTS
QPS_ERR = lib.GW_QPS_ERR


def _enum_names(prefix: str) -> dict[int, str]:
    return {getattr(lib, n): n[len(prefix):].lower() for n in dir(lib) if n.startswith(prefix)}


SYNDROMES = _enum_names("GW_SYND_")      # 0x13 -> "remote_access_err"
CQE_OPCODES = {k: v for k, v in _enum_names("GW_CQE_").items() if k < 16}   # 0xd -> "req_err"
REASONS = _enum_names("GW_REASON_")      # 1 -> "bad_rkey"
SYNDROME = {v: k for k, v in SYNDROMES.items()}
REASON = {v: k for k, v in REASONS.items()}

# Word offsets (in u32 units) the device verbs write; all derived from the header.
CTRL_W_OPMOD_IDX_OPCODE = offset("struct gw_wqe_ctrl_seg", "opmod_idx_opcode") // 4
CTRL_W_QPN_DS = offset("struct gw_wqe_ctrl_seg", "qpn_ds") // 4
CTRL_W_FLAGS = offset("struct gw_wqe_ctrl_seg", "signature") // 4   # signature..fm_ce_se word
CTRL_FM_CE_SE_BYTE = offset("struct gw_wqe_ctrl_seg", "fm_ce_se") % 4
CTRL_W_IMM = offset("struct gw_wqe_ctrl_seg", "imm") // 4
RADDR_BASE = ffi.sizeof("struct gw_wqe_ctrl_seg")
DATA_BASE = RADDR_BASE + ffi.sizeof("struct gw_wqe_raddr_seg")
CQE_W_TAIL = offset("struct gw_cqe64", "wqe_counter") // 4          # wqe_counter|sig|op_own
CQE_W_BYTE_CNT = offset("struct gw_cqe64", "byte_cnt") // 4
CQE_W_SYNDROME = offset("struct gw_err_cqe", "hw_err_synd") // 4    # hw..syndrome word
CQ_DBREC_W_SET_CI = offset("struct gw_cq_dbrec", "set_ci") // 4
QP_DBREC_W_SEND = offset("struct gw_qp_dbrec", "send_counter") // 4
STATUS_W_STAGE_FREED = offset("struct gw_nic_status", "stage_freed") // 4
STATUS_W_SQ_CONSUMED = offset("struct gw_nic_status", "sq_consumed") // 4
STATUS_W_QP_STATE = offset("struct gw_nic_status", "qp_state") // 4
STATUS_WORDS = ffi.sizeof("struct gw_nic_status") // 4
STAGE_W_MAGIC_SEQ = offset("struct gw_stage_hdr", "magic_seq") // 4
STAGE_W_BYTE_COUNT = offset("struct gw_stage_hdr", "byte_count") // 4
STAGE_W_SLOTS = offset("struct gw_stage_hdr", "slots") // 4
STAGE_W_INDEX_FLAGS = offset("struct gw_stage_hdr", "wqe_index") // 4


def syndrome_name(code: int) -> str:
    return SYNDROMES.get(code, f"unknown syndrome 0x{code:02x}")


def reason_name(code: int) -> str:
    return REASONS.get(code, f"unknown reason {code}")


def decode_cqe(raw, emulated: bool = True) -> dict:
    """What one 64-byte completion says, in words.

    ``opcode`` and ``owner`` come from op_own; a successful requester completion gives
    ``byte_cnt``; an error completion (``req_err``/``resp_err``) gives the named mlx5
    ``syndrome``, the failed WQE's opcode and the vendor syndrome. On the emulated NIC
    the vendor syndrome is gpuwrite's reason (``emulated=True``); on a real NIC it is
    the hardware's own code and is reported as a number.
    """
    cqe = np.frombuffer(bytes(raw), dtype=CQE64, count=1)[0]
    op_own = int(cqe["op_own"])
    opcode = op_own >> 4
    out = {"opcode": CQE_OPCODES.get(opcode, f"unknown opcode 0x{opcode:x}"),
           "owner": op_own & 1, "wqe_counter": int(cqe["wqe_counter"])}
    if opcode in (lib.GW_CQE_REQ_ERR, lib.GW_CQE_RESP_ERR):
        err = np.frombuffer(bytes(raw), dtype=ERR_CQE, count=1)[0]
        word = int(err["s_wqe_opcode_qpn"])
        vendor = int(err["vendor_err_synd"])
        out.update(error=True, qpn=word & 0xFFFFFF, wqe_opcode=word >> 24,
                   syndrome=syndrome_name(int(err["syndrome"])),
                   syndrome_code=int(err["syndrome"]), vendor_err_synd=vendor,
                   hw_err_synd=int(err["hw_err_synd"]))
        if emulated:
            out["reason"] = reason_name(vendor)
    else:
        out.update(error=False, qpn=int(cqe["sop_drop_qpn"]) & 0xFFFFFF,
                   byte_cnt=int(cqe["byte_cnt"]))
    return out
