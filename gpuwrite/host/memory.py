"""GPU-visible memory and the buffers users hand to gpuwrite.

Queue rings, doorbell records, the staging region and destination buffers live in
pinned host memory mapped into the GPU (``cuda.mapped_array``): the GPU reaches it over
PCIe with loads and stores, the NIC engine (a host thread) with plain memory accesses,
and under unified addressing both see it at the same address. Under Numba's CUDA
simulator the same call returns an array whose numpy buffer both the simulated kernel
threads and the engine share.
"""
from __future__ import annotations

import ctypes
import math
import operator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR, cuda, driver


@dataclass(frozen=True)
class Mapped:
    """A GPU-visible host allocation: what kernels receive, and the host's view of it."""

    kernel: object          # pass this to kernels
    host: np.ndarray        # read and write it from the host through this

    @property
    def address(self) -> int:
        return self.host.ctypes.data

    @property
    def nbytes(self) -> int:
        return self.host.nbytes


def mapped(shape, dtype) -> Mapped:
    """Allocates zeroed pinned host memory mapped into the GPU."""
    arr = cuda.mapped_array(shape, dtype=dtype)
    # The simulator wraps a numpy array; on a GPU, Numba's MappedNDArray overrides view()
    # and friends, so the host gets a plain ndarray over the same memory.
    host = arr._ary if SIMULATOR else np.ndarray.view(arr, np.ndarray)
    host[...] = 0
    return Mapped(arr, host)


# cuda.h: CUdevice_attribute, CUpointer_attribute and CUmemorytype values the checks
# below read.
_CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS = 88
_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
_CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3
_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
_CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
_CU_MEMORYTYPE_HOST = 1


def _pointer_attribute(attribute: int, address: int) -> int | None:
    """Asked each time, never cached: what an address is changes as memory is allocated,
    freed and pinned."""
    value = ctypes.c_uint64()
    rc = driver().cuPointerGetAttribute(ctypes.byref(value), ctypes.c_int(attribute),
                                        ctypes.c_uint64(address))
    return value.value if rc == 0 else None


def gpu_reaches(address: int, nbytes: int) -> bool:
    """Whether a kernel can load and store [address, address + nbytes) at those same
    addresses: one allocation of GPU memory, or of pinned host memory mapped into the GPU
    (``cuda.mapped_array``, :func:`mapped`) whose device address is its host address under
    unified addressing, or any host memory where the GPU reaches pageable memory (HMM,
    ATS). The pull agent reads a pull's source and writes its bytes straight into the
    destination; a kernel's access to an address it has no mapping for faults, and the
    fault ends the CUDA context. So the agent takes no pull into other memory (a plain
    numpy array: the engine pulls with the copy engine), and no region of GPU memory is
    registered at an address the GPU cannot reach. Numba exposes no pointer attributes
    beyond the device pointer, so the driver is asked directly. Under the simulator the
    "GPU" is the host: it reaches every host address."""
    if SIMULATOR:
        return True
    if _pointer_attribute(_CU_POINTER_ATTRIBUTE_DEVICE_POINTER, address) == address:
        start = _pointer_attribute(_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, address)
        size = _pointer_attribute(_CU_POINTER_ATTRIBUTE_RANGE_SIZE, address)
        if (start is not None and size is not None
                and start <= address and address + nbytes <= start + size):
            return True
    lib = driver()
    device, pageable = ctypes.c_int(), ctypes.c_int()
    return (lib.cuCtxGetDevice(ctypes.byref(device)) == 0
            and lib.cuDeviceGetAttribute(ctypes.byref(pageable),
                                         _CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
                                         device) == 0 and bool(pageable.value))


def cpu_reaches(address: int) -> bool:
    """Whether the engine's threads (the CPU) can load and store at ``address``: memory
    the driver does not know (plain host memory), pinned host memory, or managed memory;
    not GPU memory, where a CPU access faults the process. Under the simulator every
    "GPU" buffer is host memory."""
    if SIMULATOR:
        return True
    kind = _pointer_attribute(_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address)
    return (kind is None or kind == _CU_MEMORYTYPE_HOST
            or _pointer_attribute(_CU_POINTER_ATTRIBUTE_IS_MANAGED, address) == 1)


# Bytes a device-side fill writes to push other data out of the GPU's L2 (50 MB on an
# H100, 60 on an H200).
EVICT_L2_BYTES = 128 << 20


def evict_l2(nbytes: int = EVICT_L2_BYTES) -> None:
    """Writes ``nbytes`` of scratch GPU memory from the device, so that data uploaded
    before it is read from HBM, not L2, afterwards: one warp copies a source from HBM at
    about 8 GB/s and one its upload left in L2 at 9 to 16 (H100, BENCHMARKS.md, session
    30). Waits on the legacy default stream only (a whole-device synchronize would wait for
    a persistent kernel, such as the pull agent's). The simulator has no L2: a no-op."""
    if SIMULATOR:
        return
    scratch = cuda.device_array(nbytes // 4, dtype=np.uint32)
    scratch[:] = 1
    cuda.default_stream().synchronize()


def device_zeros(shape, dtype):
    """Zeroed GPU memory (the simulator's stands in host memory)."""
    return cuda.to_device(np.zeros(shape, dtype=dtype))


class Described(NamedTuple):
    """What :func:`describe` finds out about a buffer."""

    address: int
    nbytes: int
    kind: int           # L.MEM_HOST or L.MEM_DEVICE
    writeable: bool     # False: a read-only array or interface; no write access granted


def _host_array(what: str, ary: np.ndarray) -> None:
    """Refuses a host array the engine cannot treat as plain bytes."""
    if not ary.flags.c_contiguous:
        raise ValueError(f"a registered {what} must be C-contiguous; got strides {ary.strides}")
    if ary.dtype.hasobject:
        # its elements are pointers to Python objects: a write through the NIC would
        # overwrite them
        raise TypeError(f"a registered {what} of dtype {ary.dtype} holds Python objects: "
                        "register an array of plain numbers (for example uint8 or uint32)")


def describe(buffer) -> Described:
    """(address, nbytes, memory kind, writeable) of a buffer a user registers.

    Accepts numpy arrays and our :class:`Mapped` (host memory), and anything with
    ``__cuda_array_interface__``: CuPy arrays, Numba device arrays, PyTorch tensors
    (GPU memory, which the emulated NIC pulls through the copy engine).
    """
    if isinstance(buffer, Mapped):
        return Described(buffer.address, buffer.nbytes, L.MEM_HOST, True)
    if isinstance(buffer, np.ndarray):
        _host_array("numpy array", buffer)
        return Described(buffer.ctypes.data, buffer.nbytes, L.MEM_HOST,
                         bool(buffer.flags.writeable))
    if SIMULATOR and hasattr(buffer, "_ary"):
        ary = buffer._ary   # a simulated device array: host memory standing in for GPU memory
        _host_array("device array", ary)
        return Described(ary.ctypes.data, ary.nbytes, L.MEM_DEVICE, bool(ary.flags.writeable))
    cai = getattr(buffer, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(
            f"cannot register a {type(buffer).__name__}: give a numpy array, a gpuwrite "
            "mapped buffer, or an object with __cuda_array_interface__ (CuPy, Numba, PyTorch)")
    return _from_interface(type(buffer).__name__, cai)


def _from_interface(name: str, cai) -> Described:
    """Checks a ``__cuda_array_interface__`` (version 2 or 3: shape, typestr, data,
    optional strides) before any of it reaches the engine."""
    what = f"{name}'s __cuda_array_interface__"
    try:
        shape, typestr, data = cai["shape"], cai["typestr"], cai["data"]
        address, read_only = data
        extents = [operator.index(extent) for extent in shape]
        dtype = np.dtype(typestr)
        address = operator.index(address)
    except (TypeError, KeyError, ValueError) as exc:
        raise TypeError(f"{what} is malformed ({exc!r}): it needs 'shape' (a tuple of ints), "
                        "'typestr' (a numpy type string) and 'data' (address, read-only)") from None
    if any(extent < 0 for extent in extents):
        raise ValueError(f"{what} has shape {tuple(shape)}: extents must be >= 0")
    if dtype.hasobject:
        raise TypeError(f"{what} has typestr {typestr!r}, which holds Python objects")
    if not 0 <= address < 1 << 64:
        raise ValueError(f"{what} has address {address:#x}: allowed 0 to 2**64 - 1")
    strides = cai.get("strides")
    if strides is not None:
        expect, acc = [], dtype.itemsize
        for extent in reversed(extents):
            expect.insert(0, acc)
            acc *= extent
        if tuple(strides) != tuple(expect) and math.prod(extents) > 1:
            raise ValueError(f"a registered GPU buffer must be C-contiguous; strides {strides}")
    if cai.get("mask") is not None:
        raise ValueError(f"{what} has a mask: register an array without one (the NIC moves "
                         "every byte)")
    # Python integers: np.prod would wrap a product past 2**63 without a word
    nbytes = math.prod(extents) * dtype.itemsize
    if address + nbytes > 1 << 64:
        raise ValueError(f"{what} describes {nbytes} bytes at {address:#x}, past the end of "
                         "the address space")
    return Described(address, nbytes, L.MEM_DEVICE, not read_only)
