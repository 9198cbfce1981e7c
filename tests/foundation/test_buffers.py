"""Users register numpy arrays, GPU arrays and anything with __cuda_array_interface__."""
import numpy as np
import pytest

from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.host.memory import describe, mapped


def test_numpy_and_mapped_buffers_are_host_memory():
    a = np.zeros(100, dtype=np.uint32)
    assert describe(a) == (a.ctypes.data, 400, L.MEM_HOST, True)
    m = mapped((64,), np.uint64)
    assert describe(m) == (m.address, 512, L.MEM_HOST, True)


def test_gpu_arrays_are_device_memory(nic):
    d = cuda.to_device(np.arange(256, dtype=np.uint32))
    addr, nbytes, kind, _writeable = describe(d)
    assert nbytes == 1024 and kind == L.MEM_DEVICE and addr != 0
    mr = nic.alloc_pd().reg_mr(d, access=L.ACCESS_LOCAL_WRITE)
    assert (mr.address, mr.length, mr.kind) == (addr, 1024, L.MEM_DEVICE)
    assert mr.lkey == mr.rkey and mr.lkey >> 8 >= 1


@pytest.mark.skipif(SIMULATOR, reason="CuPy arrays need a real GPU")
def test_cupy_arrays_are_accepted(nic):
    cp = pytest.importorskip("cupy")
    x = cp.arange(1000, dtype=cp.float32)
    mr = nic.alloc_pd().reg_mr(x)
    assert mr.address == x.data.ptr and mr.length == 4000 and mr.kind == L.MEM_DEVICE


def test_unusable_buffers_are_refused_with_a_reason():
    with pytest.raises(TypeError, match="cannot register a list"):
        describe([1, 2, 3])
    with pytest.raises(ValueError, match="C-contiguous"):
        describe(np.zeros((4, 4))[:, 1])
