"""Helpers for the foundation tests (a unique module name: tests/ has several folders)."""
import numpy as np

from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR

ACCESS_RW = L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE
# The engine counter of each path's payload bytes (how the NIC got them).
BYTES_BY_PATH = {"gpu_push": "bytes_pushed", "gpu_push_inline": "bytes_inline",
                 "nic_pull": "bytes_pulled", "host_staged": "bytes_host_read"}


def canaried(nbytes: int, guard: int = 256):
    """A buffer with canary bytes before and after the part that gets registered."""
    whole = np.full(nbytes + 2 * guard, 0xA5, dtype=np.uint8)
    return whole, whole[guard:guard + nbytes], guard


def small(n_gpu: int, n_sim: int) -> int:
    """A workload size: full on a GPU, small on the CUDA simulator (2-core CI)."""
    return n_sim if SIMULATOR else n_gpu
