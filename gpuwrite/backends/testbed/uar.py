"""NIC memory seen by the GPU: the UAR doorbell page and on-NIC device memory.

Both are I/O memory that rdma-core maps into the process (the UAR page by ``mmap`` of
the device's command fd, device memory by ``ibv_alloc_dm``). ``map_io_into_gpu`` makes
such a range reachable from kernels, as NVSHMEM's IBGDA does: ``cuMemHostRegister`` with
``CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_DEVICEMAP`` (the driver must let the
GPU map peer registers: ``PeerMappingOverride=1``, see ``gpuwrite doctor``), then
``cuMemHostGetDevicePointer`` for the address kernels use.

``device_view`` wraps any device address as an array kernels take, with explicit
strides: the doorbell "array" of a QueueSet has stride 0, so that every QP row rings
the one doorbell register of the UAR page they share. Under Numba's CUDA simulator the
address is a host address and the view is a plain numpy view of it.
"""
from __future__ import annotations

import ctypes
import mmap
from dataclasses import dataclass

import numpy as np

from gpuwrite.cudaenv import SIMULATOR, cuda

PAGE_BYTES = mmap.PAGESIZE
# mlx5: the doorbell register sits at offset 0x800 of a UAR page (rdma-core
# providers/mlx5: MLX5_BF_OFFSET); Mlx5UAR.reg_addr already points at it.
MLX5_BF_OFFSET = 0x800


class GpuMappingError(RuntimeError):
    """The GPU could not map a range of NIC memory; the message says which and why."""


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        from cuda.bindings import driver

        name = driver.cuGetErrorName(err)[1]
        raise GpuMappingError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}"
                              f" ({int(err)})")
    return result[1] if len(result) == 2 else result[1:]


@dataclass
class GpuMapping:
    """A host-mapped I/O range registered with CUDA; ``device_address`` is what kernels use
    for ``host_address``. ``close()`` unregisters it."""

    host_base: int
    length: int
    device_base: int

    def device_address(self, host_address: int) -> int:
        if not self.host_base <= host_address < self.host_base + self.length:
            raise ValueError(f"0x{host_address:x} is outside the mapped range "
                             f"0x{self.host_base:x}+{self.length}")
        return self.device_base + (host_address - self.host_base)

    def close(self) -> None:
        if self.host_base and not SIMULATOR:
            from cuda.bindings import driver

            driver.cuMemHostUnregister(self.host_base)
        self.host_base = 0


def page_span(address: int, length: int, page_bytes: int = PAGE_BYTES) -> tuple[int, int]:
    """The page-aligned (base, length) covering [address, address + length)."""
    base = address & ~(page_bytes - 1)
    end = (address + length + page_bytes - 1) & ~(page_bytes - 1)
    return base, end - base


def map_io_into_gpu(host_address: int, length: int, io_memory: bool = True) -> GpuMapping:
    """Registers NIC I/O memory mapped at ``host_address`` with CUDA for GPU access.
    ``io_memory=False`` registers ordinary host pages instead (a fake NIC's, ``Verbs.io_memory``):
    the driver refuses IOMEMORY for them with CUDA_ERROR_INVALID_VALUE."""
    base, span = page_span(host_address, length)
    if SIMULATOR:
        return GpuMapping(base, span, base)
    from cuda.bindings import driver

    flags = driver.CU_MEMHOSTREGISTER_DEVICEMAP
    if io_memory:
        flags |= driver.CU_MEMHOSTREGISTER_IOMEMORY
    _check(driver.cuMemHostRegister(base, span, flags),
           f"cuMemHostRegister(0x{base:x}, {span}, {'IOMEMORY|' if io_memory else ''}DEVICEMAP) of "
           "NIC memory (does the driver allow it? see `gpuwrite doctor`: PeerMappingOverride)")
    try:
        device = _check(driver.cuMemHostGetDevicePointer(base, 0), "cuMemHostGetDevicePointer")
    except GpuMappingError:
        driver.cuMemHostUnregister(base)
        raise
    return GpuMapping(base, span, int(device))


class _Cai:
    """An object exposing a device address as ``__cuda_array_interface__``."""

    def __init__(self, address, shape, dtype, strides):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "strides": tuple(strides), "typestr": np.dtype(dtype).str,
            "data": (int(address), False), "version": 3}


def device_view(address: int, shape, dtype, strides=None, keep=None):
    """An array kernels take, over ``address`` (a device address; a host address under
    the simulator). ``strides`` in bytes, C order by default; ``keep`` stays alive with it."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if strides is None:
        strides, acc = [], dtype.itemsize
        for extent in reversed(shape):
            strides.insert(0, acc)
            acc *= extent
    strides = tuple(int(s) for s in strides)
    if SIMULATOR:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        span = sum((n - 1) * s for n, s in zip(shape, strides)) + dtype.itemsize
        raw = (ctypes.c_char * span).from_address(int(address))
        view = np.ndarray(shape, dtype=dtype, buffer=raw, strides=strides)
        return FakeCUDAArray(view)
    holder = _Cai(address, shape, dtype, strides)
    array = cuda.as_cuda_array(holder)
    array._gw_keep = keep
    return array
