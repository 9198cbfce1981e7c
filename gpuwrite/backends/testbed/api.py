"""The pyverbs classes and constants testbed mode uses, gathered in one object.

:class:`Verbs` holds every pyverbs class the backend constructs (context, PD, UMEM, UAR,
DevX object, MRs, device memory) and every enum value it passes, resolved once. The
queue set and the selftest take a ``Verbs``; tests hand them a fake one, so the order in
which objects are made and released can be checked without a NIC.

Enum spellings. pyverbs declares its enums as Cython ``cpdef enum``s. Up to Cython 3.0
each member is also a module attribute (``mlx5_enums.MLX5DV_CONTEXT_FLAGS_DEVX``);
since Cython 3.1 a *named* cpdef enum no longer puts its members in the module
namespace (rdma-core commit a45b3aaa6 adapts its own tests), so only
``mlx5_enums.mlx5dv_context_attr_flags.MLX5DV_CONTEXT_FLAGS_DEVX`` exists there.
:func:`enum_value` accepts both.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

# rdma-core providers/mlx5/mlx5_api.h (691953d8): MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED is
# (1U << 31). pyverbs (44.0) has no name for it; older libmlx5 refuse it with EOPNOTSUPP.
MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED = 1 << 31

# (attribute, module, enum type, member): module is "ibv" (pyverbs.enums, or
# pyverbs.libibverbs_enums in newer rdma-core) or "mlx5" (pyverbs.providers.mlx5.mlx5_enums).
# The enum type names are those of rdma-core's pyverbs/libibverbs_enums.pxd and
# pyverbs/providers/mlx5/mlx5_enums.pxd (691953d8); None: an anonymous ``cpdef enum``,
# whose members stay module attributes under every Cython.
ENUMS = (
    ("CONTEXT_FLAGS_DEVX", "mlx5", "mlx5dv_context_attr_flags", "MLX5DV_CONTEXT_FLAGS_DEVX"),
    ("OBJ_PD", "mlx5", "mlx5dv_obj_type", "MLX5DV_OBJ_PD"),
    ("UMEM_MASK_DMABUF", "mlx5", None, "MLX5DV_UMEM_MASK_DMABUF"),
    ("PORT_ACTIVE", "ibv", "ibv_port_state", "IBV_PORT_ACTIVE"),
    ("LINK_LAYER_ETHERNET", "ibv", None, "IBV_LINK_LAYER_ETHERNET"),
    ("GID_TYPE_SYSFS_ROCE_V2", "ibv", "ibv_gid_type_sysfs", "IBV_GID_TYPE_SYSFS_ROCE_V2"),
    ("ACCESS_LOCAL_WRITE", "ibv", "ibv_access_flags", "IBV_ACCESS_LOCAL_WRITE"),
    ("ACCESS_REMOTE_WRITE", "ibv", "ibv_access_flags", "IBV_ACCESS_REMOTE_WRITE"),
    ("ACCESS_REMOTE_READ", "ibv", "ibv_access_flags", "IBV_ACCESS_REMOTE_READ"),
    ("ACCESS_ZERO_BASED", "ibv", "ibv_access_flags", "IBV_ACCESS_ZERO_BASED"),
)
# Plain module constants (``def`` in the .pyx, not enum members): one spelling only.
# rdma-core pyverbs/providers/mlx5/mlx5_enums.pyx: _MLX5DV_UAR_ALLOC_TYPE_BF/_NC.
CONSTANTS = (("UAR_ALLOC_TYPE_BF", "mlx5", "_MLX5DV_UAR_ALLOC_TYPE_BF"),
             ("UAR_ALLOC_TYPE_NC", "mlx5", "_MLX5DV_UAR_ALLOC_TYPE_NC"))


class EnumMissing(AttributeError):
    """A pyverbs enum member exists under neither spelling."""


def enum_value(module, enum_type: str | None, member: str) -> int:
    """``module.member`` (Cython < 3.1) or ``module.enum_type.member`` (Cython >= 3.1)."""
    value = getattr(module, member, None)
    if value is None and enum_type is not None:
        value = getattr(getattr(module, enum_type, None), member, None)
    if value is None:
        raise EnumMissing(f"pyverbs module {getattr(module, '__name__', module)!r} has neither "
                          f"{member} nor {enum_type}.{member}: is this rdma-core's pyverbs?")
    return int(value)


def resolve_constants(ibv, mlx5) -> SimpleNamespace:
    modules = {"ibv": ibv, "mlx5": mlx5}
    values = {name: enum_value(modules[mod], enum, member) for name, mod, enum, member in ENUMS}
    for name, mod, member in CONSTANTS:
        if not hasattr(modules[mod], member):
            raise EnumMissing(f"pyverbs' mlx5_enums has no {member}")
        values[name] = int(getattr(modules[mod], member))
    values["UAR_ALLOC_TYPE_NC_DEDICATED"] = MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED
    return SimpleNamespace(**values)


@dataclass(frozen=True)
class Verbs:
    """pyverbs' classes and resolved constants (``c``); ``map_dm`` maps device memory."""

    Mlx5Context: type
    Mlx5DVContextAttr: type
    PD: type
    Mlx5DvObj: type
    Mlx5UMEM: type
    Mlx5UAR: type
    Mlx5DevxObj: type
    MR: type
    DM: type
    AllocDmAttr: type
    DMMR: type
    PyverbsError: type
    c: SimpleNamespace
    map_dm: object
    resolve_mac: object
    reg_dmabuf_mr: object       # dmabuf_mr.reg_dmabuf_mr: a dma-buf MR addressed from an iova
    # Whether UAR pages and device memory are a device's I/O memory (a real NIC's: they are
    # registered with CUDA as IOMEMORY). A fake NIC hands out ordinary host pages, which
    # the driver registers only without that flag (tests/testbed/fakeverbs.py).
    io_memory: bool = True


def load() -> Verbs:
    """The real pyverbs (raises PyverbsMissing where it does not import)."""
    from gpuwrite.backends.testbed._pyverbs import import_pyverbs

    import_pyverbs()
    try:
        import pyverbs.enums as ibv
    except ImportError:   # newer rdma-core names the module libibverbs_enums
        import pyverbs.libibverbs_enums as ibv
    from pyverbs.device import DM, AllocDmAttr
    from pyverbs.mr import DMMR, MR
    from pyverbs.pd import PD
    from pyverbs.providers.mlx5 import mlx5_enums as mlx5
    from pyverbs.providers.mlx5.mlx5dv import (Mlx5Context, Mlx5DevxObj, Mlx5DVContextAttr, Mlx5UAR,
                                               Mlx5UMEM)
    from pyverbs.providers.mlx5.mlx5dv_objects import Mlx5DvObj
    from pyverbs.pyverbs_error import PyverbsError

    from gpuwrite.backends.testbed.ah import resolve_mac
    from gpuwrite.backends.testbed.dm import map_dm
    from gpuwrite.backends.testbed.dmabuf_mr import reg_dmabuf_mr

    return Verbs(Mlx5Context=Mlx5Context, Mlx5DVContextAttr=Mlx5DVContextAttr, PD=PD,
                 Mlx5DvObj=Mlx5DvObj, Mlx5UMEM=Mlx5UMEM, Mlx5UAR=Mlx5UAR, Mlx5DevxObj=Mlx5DevxObj,
                 MR=MR, DM=DM, AllocDmAttr=AllocDmAttr, DMMR=DMMR,
                 PyverbsError=PyverbsError, c=resolve_constants(ibv, mlx5), map_dm=map_dm,
                 resolve_mac=resolve_mac, reg_dmabuf_mr=reg_dmabuf_mr)
