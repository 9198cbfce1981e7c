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
