"""Chooses between a real GPU and Numba's CUDA simulator, once, before numba.cuda loads.

Where no CUDA driver or no GPU is found, gpuwrite runs every kernel on Numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``) and says so in its output. A user can force
either world by setting ``NUMBA_ENABLE_CUDASIM`` themselves.
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys

import numpy as np


# Kernels load eagerly. gpuwrite always runs a kernel that spins on host memory while
# something else must make progress: the engine (whose copy-engine pulls call the CUDA
# driver), the GPU pull agent, a second kernel. With lazy loading (CUDA 12.2's default),
# loading a kernel or a driver-internal module can wait for the context to go idle, which
# the spinning kernel never lets it do until its own timeout (NVIDIA's CUDA C
# Programming Guide, "Lazy Loading", on concurrent execution). The two nic_pull hangs
# seen on an H100 had other causes (see ``preload`` and api.Session; BENCHMARKS.md,
# session 7). Read at cuInit, so set before the probe below; a value the user set is kept
# (Context warns).
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")


@functools.cache
def driver():
    """The CUDA driver library, initialised, for what Numba does not expose (pointer
    attributes, streams that do not wait for the legacy default stream, the loading
    mode); None where there is none."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return libcuda if libcuda.cuInit(0) == 0 else None


@functools.lru_cache(maxsize=None)
def lazy_loading() -> bool:
    """Whether this process's CUDA driver loads modules lazily (cuModuleGetLoadingMode;
    fixed from cuInit on, so asked once)."""
    libcuda = driver()
    mode = ctypes.c_int(0)
    try:
        if libcuda is None or libcuda.cuModuleGetLoadingMode(ctypes.byref(mode)) != 0:
            return False
    except AttributeError:      # a driver older than CUDA 11.7
        return False
    return mode.value == 2      # CU_MODULE_LAZY_LOADING


def _gpu_present() -> bool:
    libcuda = driver()
    count = ctypes.c_int(0)
    if libcuda is None or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    return count.value > 0


if "NUMBA_ENABLE_CUDASIM" not in os.environ and "numba.cuda" not in sys.modules:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if _gpu_present() else "1"
    if "numba.core.config" in sys.modules:
        # numba itself was imported first (the model's simulator core imports it): its
        # configuration has read the environment already, so have it read it again.
        from numba.core import config as _numba_config
        _numba_config.reload_config()

# numba-cuda 0.30.4 calls np.row_stack, which numpy 2.5 removed (MACHINE-NOTES.md);
# the alias is exact: row_stack was always vstack.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

SIMULATOR: bool = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")

from numba import cuda  # noqa: E402  (after the environment is settled)

__all__ = ["cuda", "SIMULATOR", "world", "preload", "check_capability"]


def world() -> str:
    """A one-line description of where kernels run, for every command's output."""
    if SIMULATOR:
        return "Numba CUDA simulator (no GPU): kernels run as Python threads on the CPU"
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    return f"GPU {name} (compute capability {dev.compute_capability[0]}.{dev.compute_capability[1]})"


# The oldest GPUs the device verbs compile for: they use cp.async (sm_80 on) and system-
# scope acquire and release (sm_70 on). Measured on sm_90 (H100, H200) only.
MIN_COMPUTE_CAPABILITY = (8, 0)


def check_capability(device=None) -> None:
    """Refuses, by name, a GPU the device verbs cannot compile for (where the kernels
    would fail later, inside the PTX compiler). Nothing to check on the simulator."""
    if SIMULATOR and device is None:
        return
    dev = device or cuda.get_current_device()
    cc = tuple(dev.compute_capability)
    if cc < MIN_COMPUTE_CAPABILITY:
        name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
        raise RuntimeError(
            f"GPU {name} has compute capability {cc[0]}.{cc[1]}; gpuwrite's device verbs need "
            f"{MIN_COMPUTE_CAPABILITY[0]}.{MIN_COMPUTE_CAPABILITY[1]} or newer (cp.async): use a "
            "newer GPU, or the CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")


def preload(dispatcher, *args) -> None:
    """Compiles ``dispatcher`` for ``args`` and loads it into the current context now.

    A kernel's first launch compiles it and loads its module, and loading can wait for
    the context's running kernels. A kernel that must run beside a persistent one (the
    GPU pull agent) is therefore loaded before that one starts: on an H100, the first
    nic_pull run of a process launched its sender beside the agent and hung for 77 s
    (BENCHMARKS.md, session 7). Nothing to do on the simulator."""
    if SIMULATOR:
        return
    from numba import typeof

    kernel = dispatcher.compile(tuple(typeof(a) for a in args))
    kernel._codelibrary.get_cufunc()    # numba-cuda loads the module here (no public call)
