"""Whether the GPU can store into an address (``gpuwrite.host.memory.gpu_reaches``), with
the driver's answers stood in: on the simulator the function answers True before it asks
the driver, so without a stand-in only the GPU suite would run its logic. The pull agent
writes only where it answers True; a wrong True there ends the CUDA context
(BENCHMARKS.md, session 47)."""
import ctypes

import pytest

from gpuwrite.host import memory

BASE = 0x7F00_0000_0000


class FakeDriver:
    """Answers cuPointerGetAttribute from ``ranges`` (start -> size of memory the GPU maps at
    the same address) and the pageable-access attribute from ``pageable``."""

    def __init__(self, ranges, pageable=0):
        self.ranges, self.pageable = dict(ranges), pageable

    def _range(self, address):
        for start, size in self.ranges.items():
            if start <= address < start + size:
                return start, size
        return None

    def cuPointerGetAttribute(self, ref, attribute, address):
        found = self._range(address.value)
        if found is None:
            return 1                                      # CUDA_ERROR_INVALID_VALUE
        start, size = found
        ref._obj.value = {memory._CU_POINTER_ATTRIBUTE_DEVICE_POINTER: address.value,
                          memory._CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: start,
                          memory._CU_POINTER_ATTRIBUTE_RANGE_SIZE: size}[attribute.value]
        return 0

    def cuCtxGetDevice(self, ref):
        ref._obj.value = 0
        return 0

    def cuDeviceGetAttribute(self, ref, attribute, device):
        assert attribute == memory._CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS
        ref._obj.value = self.pageable
        return 0


@pytest.fixture
def fake(monkeypatch):
    driver = FakeDriver({BASE: 1 << 20})
    monkeypatch.setattr(memory, "SIMULATOR", False)
    monkeypatch.setattr(memory, "driver", lambda: driver)
    return driver


def test_memory_the_gpu_maps_is_reached_only_within_its_allocation(fake):
    assert memory.gpu_reaches(BASE, 1 << 20)
    assert memory.gpu_reaches(BASE + 4096, 64)
    assert not memory.gpu_reaches(BASE + 4096, 1 << 20), "runs past the allocation's end"
    assert not memory.gpu_reaches(BASE + (2 << 20), 64), "memory the driver does not know"


def test_pageable_access_reaches_any_host_memory(fake):
    fake.pageable = 1
    assert memory.gpu_reaches(BASE + (2 << 20), 64)
    assert memory.gpu_reaches(BASE + 4096, 1 << 20)


def test_the_driver_is_asked_each_time(fake):
    """An address changes what it is as memory is freed, allocated and pinned: an answer
    kept from before would let the agent store where the GPU no longer maps."""
    assert memory.gpu_reaches(BASE, 64)
    del fake.ranges[BASE]                       # freed
    assert not memory.gpu_reaches(BASE, 64)
    fake.ranges[BASE] = 4096                    # pinned again, smaller
    assert memory.gpu_reaches(BASE, 64) and not memory.gpu_reaches(BASE, 8192)


def test_byref_objects_are_what_the_fake_writes():
    """The stand-in writes through ``ctypes.byref(...)._obj``, as the real driver writes
    through the pointer: if ctypes changed that, the tests above would prove nothing."""
    value = ctypes.c_uint64()
    ref = ctypes.byref(value)
    ref._obj.value = 7
    assert value.value == 7


class TypedDriver:
    """Answers the memory type and managed attributes of ``kinds`` (start -> (size,
    CUmemorytype, managed)), and, for device memory, the device pointer and its range."""

    def __init__(self, kinds):
        self.kinds = kinds

    def cuPointerGetAttribute(self, ref, attribute, address):
        for start, (size, kind, managed) in self.kinds.items():
            if start <= address.value < start + size:
                ref._obj.value = {memory._CU_POINTER_ATTRIBUTE_MEMORY_TYPE: kind,
                                  memory._CU_POINTER_ATTRIBUTE_IS_MANAGED: managed,
                                  memory._CU_POINTER_ATTRIBUTE_DEVICE_POINTER: address.value,
                                  memory._CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: start,
                                  memory._CU_POINTER_ATTRIBUTE_RANGE_SIZE: size}[attribute.value]
                return 0
        return 1


_DEVICE, _HOST = 2, memory._CU_MEMORYTYPE_HOST


def test_the_cpu_reaches_host_pinned_and_managed_memory_only(monkeypatch):
    """The engine's threads copy host and staging regions with the CPU: GPU memory
    registered as either would fault the process at its first write."""
    monkeypatch.setattr(memory, "SIMULATOR", False)
    monkeypatch.setattr(memory, "driver", lambda: TypedDriver({
        BASE: (4096, _DEVICE, 0), BASE + 8192: (4096, _HOST, 0),
        BASE + 16384: (4096, _DEVICE, 1)}))
    assert not memory.cpu_reaches(BASE + 64), "GPU memory"
    assert memory.cpu_reaches(BASE + 8192), "pinned host memory"
    assert memory.cpu_reaches(BASE + 16384), "managed memory"
    assert memory.cpu_reaches(BASE + (1 << 20)), "memory the driver does not know: the host's"


def test_gpu_memory_is_not_registered_as_host_or_staging(monkeypatch):
    import numpy as np

    from gpuwrite import layouts as L
    from gpuwrite.host.verbs import Context

    class Interface:      # "GPU memory" at a host array's address, so nothing can fault
        def __init__(self, array):
            self.array = array
            self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str,
                                             "data": (array.ctypes.data, False), "version": 3}

    d = Interface(np.zeros(64, np.uint32))
    address = d.array.ctypes.data
    with Context() as ctx:
        pd = ctx.alloc_pd()
        monkeypatch.setattr(memory, "SIMULATOR", False)
        monkeypatch.setattr(memory, "driver", lambda: TypedDriver({address: (256, _DEVICE, 0)}))
        for kind in (L.MEM_HOST, L.MEM_STAGING):
            with pytest.raises(ValueError, match="GPU memory the CPU cannot reach"):
                pd.reg_mr(d, kind=kind)
        assert pd.reg_mr(d).kind == L.MEM_DEVICE
