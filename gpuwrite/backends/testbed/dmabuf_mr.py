"""A dma-buf memory region addressed by GPU addresses: ``ibv_reg_dmabuf_mr`` with an iova.

Kernels compute nic_pull's source address from their array (``api.put``), so the MR's
address space must be the GPU's. pyverbs' ``DmaBufMR`` passes the dma-buf offset as the
iova (rdma-core pyverbs/mr.pyx: ``ibv_reg_dmabuf_mr(pd, offset, length, offset, fd,
access)``), which makes WQE addresses offsets in the dma-buf. libibverbs takes any iova
with the offset's page offset; NCCL passes the buffer's own address (net_ib.cc,
``wrap_ibv_reg_dmabuf_mr(&mr, pd, offset, size, addr, fd, flags)``), and so does this.

pyverbs exposes no ``ibv_pd *``, so this goes through ctypes on a second context imported
from the same command fd, with the PD imported by handle (as ah.py and dm.py do): the MR
lives in the same PD, so its keys are valid for the DevX QPs. The imported context stays
open until the MR is deregistered. ``struct ibv_mr`` is checked against the installed
verbs.h (tests/testbed/test_dm_layout.py).
"""
from __future__ import annotations

import ctypes
import os

from gpuwrite.backends.testbed.dm import DeviceMemoryError, _library


class IbvMr(ctypes.Structure):
    """struct ibv_mr (verbs.h)."""

    _fields_ = [("context", ctypes.c_void_p), ("pd", ctypes.c_void_p), ("addr", ctypes.c_void_p),
                ("length", ctypes.c_size_t), ("handle", ctypes.c_uint32), ("lkey", ctypes.c_uint32),
                ("rkey", ctypes.c_uint32)]


class DmabufMrError(RuntimeError):
    """A dma-buf registration failed; the message names the call and the errno."""


def _bind(ibv) -> None:
    ibv.ibv_import_device.restype = ctypes.c_void_p
    ibv.ibv_import_device.argtypes = [ctypes.c_int]
    ibv.ibv_import_pd.restype = ctypes.c_void_p
    ibv.ibv_import_pd.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    ibv.ibv_reg_dmabuf_mr.restype = ctypes.POINTER(IbvMr)
    ibv.ibv_reg_dmabuf_mr.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t,
                                      ctypes.c_uint64, ctypes.c_int, ctypes.c_int]
    ibv.ibv_dereg_mr.argtypes = [ctypes.POINTER(IbvMr)]
    for name in ("ibv_unimport_pd", "ibv_close_device"):
        getattr(ibv, name).argtypes = [ctypes.c_void_p]


class DmabufMr:
    """The registration: ``lkey``, ``rkey``, ``iova``, ``length``; ``close()`` deregisters
    it, then lets go of the imported PD and context."""

    def __init__(self, ibv, context: int, pd: int, mr, iova: int):
        self._ibv, self._context, self._pd, self._mr = ibv, context, pd, mr
        self.lkey, self.rkey = int(mr.contents.lkey), int(mr.contents.rkey)
        self.length, self.iova = int(mr.contents.length), iova

    def close(self) -> None:
        if self._mr is not None:
            rc = self._ibv.ibv_dereg_mr(self._mr)
            if rc != 0:
                raise DmabufMrError(f"ibv_dereg_mr(lkey 0x{self.lkey:x}) failed: "
                                    f"{os.strerror(abs(rc))}")
            self._mr = None
        if self._pd:
            self._ibv.ibv_unimport_pd(self._pd)
            self._pd = None
        if self._context:
            self._ibv.ibv_close_device(self._context)
            self._context = None


def reg_dmabuf_mr(cmd_fd: int, pd_handle: int, fd: int, offset: int, length: int, iova: int,
                  access: int) -> DmabufMr:
    """Registers ``length`` bytes of dma-buf ``fd`` from ``offset`` in the PD with kernel
    handle ``pd_handle`` of the context on ``cmd_fd``, addressed from ``iova``."""
    try:
        ibv = _library("ibverbs")
    except DeviceMemoryError as exc:
        raise DmabufMrError(str(exc)) from None
    if not hasattr(ibv, "ibv_reg_dmabuf_mr"):
        raise DmabufMrError("this libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34 or newer)")
    _bind(ibv)
    dup = os.dup(cmd_fd)
    context = ibv.ibv_import_device(dup)
    if not context:
        os.close(dup)
        raise DmabufMrError(f"ibv_import_device failed: {os.strerror(ctypes.get_errno())}")
    pd = None
    try:
        pd = ibv.ibv_import_pd(context, pd_handle)
        if not pd:
            raise DmabufMrError(f"ibv_import_pd({pd_handle}) failed: {os.strerror(ctypes.get_errno())}")
        mr = ibv.ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access)
        if not mr:
            raise DmabufMrError(f"ibv_reg_dmabuf_mr(offset {offset}, {length} bytes, iova 0x{iova:x}) "
                                f"failed: {os.strerror(ctypes.get_errno())}")
    except BaseException:
        if pd:
            ibv.ibv_unimport_pd(pd)
        ibv.ibv_close_device(context)
        raise
    return DmabufMr(ibv, context, pd, mr, iova)
