"""On-NIC device memory (``ibv_alloc_dm``): gpu_push's staging region.

pyverbs allocates the memory (``pyverbs.device.DM``) and registers it (``DMMR``, zero-based:
a WQE's data segment addresses it by offset), but does not expose where mlx5 maps it into
the process (``mlx5dv_init_obj`` with ``MLX5DV_OBJ_DM`` gives ``struct mlx5dv_dm.buf``).
``map_dm`` gets that address through libibverbs' own import path, which needs no private
pointer: ``ibv_import_device(dup(cmd_fd))`` opens a second context on the same command fd,
``ibv_import_dm(handle)`` maps the same device memory there, and ``mlx5dv_init_obj`` reads
its address. ``uar.map_io_into_gpu`` then makes it GPU-visible.

The ctypes structures mirror mlx5dv.h (``struct mlx5dv_obj``, ``struct mlx5dv_dm``);
tests/testbed/test_dm_layout.py checks them against the installed header.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass

MLX5DV_OBJ_DM = 1 << 4          # enum mlx5dv_obj_type


class _InOut(ctypes.Structure):
    _fields_ = [("in_", ctypes.c_void_p), ("out", ctypes.c_void_p)]


class Mlx5dvObj(ctypes.Structure):
    """struct mlx5dv_obj: an (in, out) pointer pair per object type."""

    _fields_ = [(name, _InOut) for name in ("qp", "cq", "srq", "rwq", "dm", "ah", "pd")]


class Mlx5dvDm(ctypes.Structure):
    """struct mlx5dv_dm."""

    _fields_ = [("buf", ctypes.c_void_p), ("length", ctypes.c_uint64),
                ("comp_mask", ctypes.c_uint64), ("remote_va", ctypes.c_uint64)]


class DeviceMemoryError(RuntimeError):
    """Device memory could not be mapped; the message says which call failed."""


def _library(name: str):
    path = ctypes.util.find_library(name)
    if path is None:
        raise DeviceMemoryError(f"lib{name} is not installed (Debian: libibverbs1, ibverbs-providers)")
    return ctypes.CDLL(path, use_errno=True)


@dataclass
class MappedDm:
    """Device memory mapped into this process: ``address`` for ``length`` bytes."""

    address: int
    length: int
    _ibv: object
    _context: int
    _dm: int

    def close(self) -> None:
        if self._dm:
            self._ibv.ibv_unimport_dm(ctypes.c_void_p(self._dm))
            self._dm = 0
        if self._context:
            self._ibv.ibv_close_device(ctypes.c_void_p(self._context))
            self._context = 0


def map_dm(cmd_fd: int, dm_handle: int) -> MappedDm:
    """Maps the device memory with kernel handle ``dm_handle`` (``pyverbs DM.handle``) of
    the context whose command fd is ``cmd_fd`` (``Context.cmd_fd``)."""
    ibv = _library("ibverbs")
    mlx5 = _library("mlx5")
    ibv.ibv_import_device.restype = ctypes.c_void_p
    ibv.ibv_import_device.argtypes = [ctypes.c_int]
    ibv.ibv_import_dm.restype = ctypes.c_void_p
    ibv.ibv_import_dm.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    ibv.ibv_unimport_dm.argtypes = [ctypes.c_void_p]
    ibv.ibv_close_device.argtypes = [ctypes.c_void_p]
    mlx5.mlx5dv_init_obj.argtypes = [ctypes.POINTER(Mlx5dvObj), ctypes.c_uint64]
    fd = os.dup(cmd_fd)
    context = ibv.ibv_import_device(fd)
    if not context:
        os.close(fd)
        raise DeviceMemoryError(f"ibv_import_device(dup of fd {cmd_fd}) failed: "
                                f"{os.strerror(ctypes.get_errno())}")
    dm = ibv.ibv_import_dm(context, dm_handle)
    if not dm:
        err = ctypes.get_errno()
        ibv.ibv_close_device(context)
        raise DeviceMemoryError(f"ibv_import_dm(handle {dm_handle}) failed: {os.strerror(err)}")
    out = Mlx5dvDm()
    obj = Mlx5dvObj()
    obj.dm.in_ = dm
    obj.dm.out = ctypes.cast(ctypes.pointer(out), ctypes.c_void_p)
    rc = mlx5.mlx5dv_init_obj(ctypes.byref(obj), MLX5DV_OBJ_DM)
    if rc != 0:
        ibv.ibv_unimport_dm(dm)
        ibv.ibv_close_device(context)
        raise DeviceMemoryError(f"mlx5dv_init_obj(MLX5DV_OBJ_DM) failed: {os.strerror(abs(rc))}")
    return MappedDm(int(out.buf), int(out.length), ibv, context, dm)
