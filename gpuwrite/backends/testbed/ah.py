"""The Ethernet address a RoCE QP sends to, resolved by the kernel through an address handle.

A DevX INIT2RTR command carries the next hop's MAC (``primary_address_path.rmac``). The
peer's own port MAC is right only when both hosts share one L2 segment; across a router
the frame must go to the router's MAC. ``ibv_create_ah`` makes the kernel resolve the
destination GID as it does for any verbs QP (neighbour lookup on the GID's netdev), and
mlx5 keeps the result in the AH's address vector; ``mlx5dv_init_obj(MLX5DV_OBJ_AH)``
exposes it. NVSHMEM's IBGDA transport takes the MAC the same way (ibgda.cpp,
``ibgda_qp_init2rtr``: ``create_ah``, ``mlx5dv_init_obj``, ``dah.av->rmac``).

pyverbs' ``Mlx5DvObj`` has no AH, so this goes through ctypes on a second context
imported from the same command fd, with the PD imported by handle (as dm.py does).
The structures mirror verbs.h/mlx5dv.h; tests/testbed/test_dm_layout.py checks them
against the installed headers.
"""
from __future__ import annotations

import ctypes
import os

from gpuwrite.backends.testbed.dm import DeviceMemoryError, Mlx5dvObj, _library

MLX5DV_OBJ_AH = 1 << 5          # enum mlx5dv_obj_type


class IbvGlobalRoute(ctypes.Structure):
    """struct ibv_global_route (dgid as 16 raw bytes: union ibv_gid)."""

    _fields_ = [("dgid", ctypes.c_uint8 * 16), ("flow_label", ctypes.c_uint32),
                ("sgid_index", ctypes.c_uint8), ("hop_limit", ctypes.c_uint8),
                ("traffic_class", ctypes.c_uint8)]


class IbvAhAttr(ctypes.Structure):
    """struct ibv_ah_attr."""

    _fields_ = [("grh", IbvGlobalRoute), ("dlid", ctypes.c_uint16), ("sl", ctypes.c_uint8),
                ("src_path_bits", ctypes.c_uint8), ("static_rate", ctypes.c_uint8),
                ("is_global", ctypes.c_uint8), ("port_num", ctypes.c_uint8)]


class Mlx5dvAh(ctypes.Structure):
    """struct mlx5dv_ah: a pointer to the AH's struct mlx5_wqe_av."""

    _fields_ = [("av", ctypes.c_void_p), ("comp_mask", ctypes.c_uint64)]


# struct mlx5_wqe_av (mlx5dv.h): key (8), dqp_dct (4), stat_rate_sl, fl_mlid, rlid (2),
# reserved0[4], then rmac[6].
MLX5_WQE_AV_RMAC_OFFSET = 20


class MacResolutionError(RuntimeError):
    """The kernel could not resolve the peer's GID to an Ethernet address."""


def format_mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def resolve_mac(cmd_fd: int, pd_handle: int, port: int, sgid_index: int, dgid: str) -> str:
    """The MAC that frames from ``port``/``sgid_index`` to ``dgid`` are sent to."""
    from gpuwrite.backends.testbed.prm import gid_to_int

    try:
        ibv, mlx5 = _library("ibverbs"), _library("mlx5")
    except DeviceMemoryError as exc:
        raise MacResolutionError(str(exc)) from None
    ibv.ibv_import_device.restype = ctypes.c_void_p
    ibv.ibv_import_device.argtypes = [ctypes.c_int]
    ibv.ibv_import_pd.restype = ctypes.c_void_p
    ibv.ibv_import_pd.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    ibv.ibv_create_ah.restype = ctypes.c_void_p
    ibv.ibv_create_ah.argtypes = [ctypes.c_void_p, ctypes.POINTER(IbvAhAttr)]
    for name in ("ibv_destroy_ah", "ibv_unimport_pd", "ibv_close_device"):
        getattr(ibv, name).argtypes = [ctypes.c_void_p]
    mlx5.mlx5dv_init_obj.argtypes = [ctypes.POINTER(Mlx5dvObj), ctypes.c_uint64]
    attr = IbvAhAttr(is_global=1, port_num=port)
    attr.grh.dgid[:] = list(gid_to_int(dgid).to_bytes(16, "big"))
    attr.grh.sgid_index = sgid_index
    attr.grh.hop_limit = 64
    fd = os.dup(cmd_fd)
    context = ibv.ibv_import_device(fd)
    if not context:
        os.close(fd)
        raise MacResolutionError(f"ibv_import_device failed: {os.strerror(ctypes.get_errno())}")
    pd = ah = None
    try:
        pd = ibv.ibv_import_pd(context, pd_handle)
        if not pd:
            raise MacResolutionError(f"ibv_import_pd({pd_handle}) failed: {os.strerror(ctypes.get_errno())}")
        ah = ibv.ibv_create_ah(pd, ctypes.byref(attr))
        if not ah:
            raise MacResolutionError(
                f"ibv_create_ah to GID {dgid} failed ({os.strerror(ctypes.get_errno())}): the kernel "
                "found no route or neighbour for it (is the peer's IP reachable from this port?)")
        out, obj = Mlx5dvAh(), Mlx5dvObj()
        obj.ah.in_ = ah
        obj.ah.out = ctypes.cast(ctypes.pointer(out), ctypes.c_void_p)
        rc = mlx5.mlx5dv_init_obj(ctypes.byref(obj), MLX5DV_OBJ_AH)
        if rc != 0 or not out.av:
            raise MacResolutionError(f"mlx5dv_init_obj(MLX5DV_OBJ_AH) failed: {os.strerror(abs(rc) or 22)}")
        raw = ctypes.string_at(out.av + MLX5_WQE_AV_RMAC_OFFSET, 6)
    finally:
        if ah:
            ibv.ibv_destroy_ah(ah)
        if pd:
            ibv.ibv_unimport_pd(pd)
        ibv.ibv_close_device(context)
    if raw == bytes(6):
        raise MacResolutionError(f"the address handle to GID {dgid} holds MAC 00:00:00:00:00:00")
    return format_mac(raw)
