"""WQEs and CQEs built and read on the host, with the header's dtypes.

The device verbs write the same bytes from kernels; tests compare the two with each
other and with rdma-core's mlx5dv helpers. Host-side posting (``HostPoster``) drives a
queue pair without a kernel: the fuzzer and the protection tests use it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwrite import layouts as L
from gpuwrite._gw_cffi import lib


def ctrl_seg(opcode: int, wqe_index: int, qpn: int, ds: int, signaled: bool = True,
             opmod: int = 0, imm: int = 0) -> np.ndarray:
    seg = np.zeros(1, dtype=L.CTRL_SEG)
    seg["opmod_idx_opcode"] = (opmod << 24) | ((wqe_index & 0xFFFF) << 8) | opcode
    seg["qpn_ds"] = (qpn << 8) | ds
    seg["fm_ce_se"] = L.CTRL_CQ_UPDATE if signaled else 0
    seg["imm"] = imm
    return seg


def raddr_seg(raddr: int, rkey: int) -> np.ndarray:
    seg = np.zeros(1, dtype=L.RADDR_SEG)
    seg["raddr"] = raddr
    seg["rkey"] = rkey
    return seg


# A data segment's byte count is 31 bits: bit 31 is mlx5's inline flag (MLX5_INLINE_SEG).
MAX_SEG_BYTES = L.INLINE_SEG_FLAG - 1


def data_seg(addr: int, length: int, lkey: int) -> np.ndarray:
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) \
            or not 0 <= length <= MAX_SEG_BYTES:
        raise ValueError(f"length={length!r}: a data segment carries 0 to {MAX_SEG_BYTES} bytes "
                         "(2^31 - 1; bit 31 of its byte count is the inline flag)")
    seg = np.zeros(1, dtype=L.DATA_SEG)
    seg["byte_count"] = length
    seg["lkey"] = lkey
    seg["addr"] = addr
    return seg


def rdma_write(wqe_index: int, qpn: int, laddr: int, lkey: int, length: int, raddr: int,
               rkey: int, signaled: bool = True, opcode: int = L.OPCODE_RDMA_WRITE) -> bytes:
    """One 64-byte RDMA-write WQE with a single data segment."""
    return (ctrl_seg(opcode, wqe_index, qpn, 3, signaled).tobytes()
            + raddr_seg(raddr, rkey).tobytes() + data_seg(laddr, length, lkey).tobytes()
            + bytes(16))


def rdma_write_inline(wqe_index: int, qpn: int, payload: bytes, raddr: int, rkey: int,
                      signaled: bool = True) -> bytes:
    """An RDMA-write WQE carrying ``payload`` inline, padded to whole basic blocks."""
    if len(payload) > L.MAX_INLINE_BYTES:
        raise ValueError(f"inline payload of {len(payload)} bytes: at most {L.MAX_INLINE_BYTES}")
    ds = -(-(L.DATA_BASE + 4 + len(payload)) // L.WQE_DS)
    body = (ctrl_seg(L.OPCODE_RDMA_WRITE, wqe_index, qpn, ds, signaled).tobytes()
            + raddr_seg(raddr, rkey).tobytes()
            + np.array([len(payload) | L.INLINE_SEG_FLAG], dtype=">u4").tobytes() + payload)
    nbb = -(-len(body) // L.WQE_BB)
    return body + bytes(nbb * L.WQE_BB - len(body))


@dataclass(frozen=True)
class Completion:
    """A CQE as read by the host."""

    wqe_counter: int
    opcode: int
    byte_count: int
    syndrome: int = 0
    reason: int = 0

    @property
    def ok(self) -> bool:
        return self.opcode == L.CQE_REQ

    def describe(self) -> str:
        if self.ok:
            return f"wqe {self.wqe_counter}: ok, {self.byte_count} bytes"
        return (f"wqe {self.wqe_counter}: error {L.syndrome_name(self.syndrome)} "
                f"(0x{self.syndrome:02x}), reason {L.reason_name(self.reason)}")


class HostPoster:
    """Posts WQEs to QP ``i`` of a QueueSet from the host and reads its completions."""

    def __init__(self, queues, i: int = 0):
        i = queues.qp_index(i)
        self.q = queues
        self.i = i
        self.qpn = int(queues.qpns[i])
        self.pi = 0
        self.ci = 0
        self._sq = queues.sq.host[i].view(np.uint8)
        self._cq = queues.cq.host[i].view(np.uint8)
        self._db = queues.dbrec.host[i]
        self._cqdb = queues.cqdb.host[i]

    def write(self, wqe: bytes) -> int:
        """Copies a WQE (whole BBs) at the producer index; returns its index."""
        if len(wqe) % L.WQE_BB:
            raise ValueError(f"a WQE is whole 64-byte blocks; got {len(wqe)} bytes")
        index = self.pi
        for k in range(len(wqe) // L.WQE_BB):
            pos = ((self.pi + k) % self.q.sq_bbs) * L.WQE_BB
            self._sq[pos:pos + L.WQE_BB] = np.frombuffer(wqe[k * L.WQE_BB:(k + 1) * L.WQE_BB],
                                                         dtype=np.uint8)
        self.pi += len(wqe) // L.WQE_BB
        return index & 0xFFFF

    def ring(self) -> None:
        """Publishes the producer index in the doorbell record (release store)."""
        from gpuwrite._gw_cffi import ffi
        addr = self._db.ctypes.data + L.QP_DBREC_W_SEND * 4
        value = int.from_bytes((self.pi & 0xFFFF).to_bytes(4, "big"), "little")
        lib.gw_store_release_u32(ffi.cast("void *", addr), value)

    def poll(self) -> Completion | None:
        """Consumes one completion if one is ready."""
        n = self.q.ncqe
        base = (self.ci % n) * L.CQE_SIZE
        entry = self._cq[base:base + L.CQE_SIZE]
        op_own = int(entry[63])
        if op_own >> 4 == L.CQE_INVALID or (op_own & 1) != (self.ci // n) & 1:
            return None
        cqe = entry.view(L.CQE64)[0]
        err = entry.view(L.ERR_CQE)[0]
        opcode = op_own >> 4
        comp = Completion(int(cqe["wqe_counter"]), opcode, int(cqe["byte_cnt"]),
                          int(err["syndrome"]) if opcode == L.CQE_REQ_ERR else 0,
                          int(err["vendor_err_synd"]) if opcode == L.CQE_REQ_ERR else 0)
        self.ci += 1
        self._cqdb[L.CQ_DBREC_W_SET_CI] = int.from_bytes((self.ci & 0xFFFFFF).to_bytes(4, "big"),
                                                         "little")
        return comp

    def reset(self) -> None:
        """After ``QueueSet.reset``: the send queue restarts at index 0."""
        self.pi = 0
