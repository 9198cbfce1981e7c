"""GPU-visible memory and the buffers users hand to gpuwrite.

Queue rings, doorbell records, the staging region and destination buffers live in
pinned host memory mapped into the GPU (``cuda.mapped_array``): the GPU reaches it over
PCIe with loads and stores, the NIC engine (a host thread) with plain memory accesses,
and under unified addressing both see it at the same address. Under Numba's CUDA
simulator the same call returns an array whose numpy buffer both the simulated kernel
threads and the engine share.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR, cuda


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


def describe(buffer) -> tuple[int, int, int]:
    """(address, nbytes, memory kind) of a buffer a user registers.

    Accepts numpy arrays and our :class:`Mapped` (host memory), and anything with
    ``__cuda_array_interface__``: CuPy arrays, Numba device arrays, PyTorch tensors
    (GPU memory, which the emulated NIC pulls through the copy engine).
    """
    if isinstance(buffer, Mapped):
        return buffer.address, buffer.nbytes, L.MEM_HOST
    if isinstance(buffer, np.ndarray):
        if not buffer.flags.c_contiguous:
            raise ValueError("a registered numpy array must be C-contiguous; "
                             f"got strides {buffer.strides}")
        return buffer.ctypes.data, buffer.nbytes, L.MEM_HOST
    if SIMULATOR and hasattr(buffer, "_ary"):
        ary = buffer._ary   # a simulated device array: host memory standing in for GPU memory
        return ary.ctypes.data, ary.nbytes, L.MEM_DEVICE
    cai = getattr(buffer, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(
            f"cannot register a {type(buffer).__name__}: give a numpy array, a gpuwrite "
            "mapped buffer, or an object with __cuda_array_interface__ (CuPy, Numba, PyTorch)")
    if cai.get("strides") not in (None,) and cai["strides"] is not None:
        itemsize = np.dtype(cai["typestr"]).itemsize
        expect = []
        acc = itemsize
        for extent in reversed(cai["shape"]):
            expect.insert(0, acc)
            acc *= extent
        if tuple(cai["strides"]) != tuple(expect):
            raise ValueError(f"a registered GPU buffer must be C-contiguous; strides {cai['strides']}")
    nbytes = int(np.prod(cai["shape"])) * np.dtype(cai["typestr"]).itemsize
    return int(cai["data"][0]), nbytes, L.MEM_DEVICE
