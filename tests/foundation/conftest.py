import numpy as np
import pytest

from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR
from gpuwrite.host.verbs import Context


@pytest.fixture
def nic():
    """A context with its engine stopped: tests drive it with ctx.poll()."""
    with Context() as ctx:
        yield ctx


def canaried(nbytes: int, guard: int = 256):
    """A buffer with canary bytes before and after the part that gets registered."""
    whole = np.full(nbytes + 2 * guard, 0xA5, dtype=np.uint8)
    return whole, whole[guard:guard + nbytes], guard


def small(n_gpu: int, n_sim: int) -> int:
    return n_sim if SIMULATOR else n_gpu


ACCESS_RW = L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE
