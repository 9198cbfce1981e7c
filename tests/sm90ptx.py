"""Compiling gpuwrite's kernels to sm_90 PTX with no GPU (NVVM only), in a child process:
what the simulator cannot show (the instructions a kernel is made of) read from the PTX.

Device functions are compiled for the current device's compute capability, so the child
names the one to compile for instead of asking the driver. In the child's code ``u32``
and ``i64`` are the scalar types (``u32[::1]`` an array of them) and ``Q`` the tuple type
``QueueSet.device_args`` has; ``SEND`` is ``send_messages``' signature (Q, then the arrays
``runner.run`` hands it).
"""
import subprocess
import sys
import tempfile

import pytest
from childenv import child_env

PRELUDE = r"""
import os, re, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
from numba import cuda, types
import numba.cuda.dispatcher as _dispatcher
class _Hopper:
    compute_capability = (9, 0)
_dispatcher.get_current_device = lambda: _Hopper()
u32, i64 = types.uint32, types.int64
Q = types.Tuple((u32[:, ::1], u32[:, ::1], types.uint64[::1], u32[:, ::1], u32[:, ::1],
                 u32[:, ::1], u32[:, ::1], i64[:, ::1], i64[:, ::1], i64[:, ::1], u32[:, ::1]))
SEND = (Q, i64[:, ::1], i64[::1], u32[::1], i64[::1], i64[::1], i64[::1], i64[:, ::1],
        i64[:, :, ::1])
"""


def compile_sm90(code: str, *extra_paths, timeout: int = 600, **env) -> str:
    """Runs ``code`` after PRELUDE in a child process; returns its stdout. Skips where the
    machine has no NVVM. The child imports the same gpuwrite as this process (installed,
    or built in place), then ``extra_paths``, and runs outside the checkout so that a source
    folder without the compiled extension cannot shadow it; ``env`` is added to its
    environment."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True,
                          text=True, env=child_env(*extra_paths, NUMBA_ENABLE_CUDASIM="0", **env),
                          timeout=timeout, cwd=tempfile.gettempdir())
    if proc.returncode != 0 and ("nvrtc" in proc.stderr.lower() or "nvvm" in proc.stderr.lower()):
        pytest.skip("no NVVM/NVRTC here to compile PTX: " + proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout
