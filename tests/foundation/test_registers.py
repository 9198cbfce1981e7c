"""The sending kernel fits its register budget without spilling.

``send_messages`` is held to ``verbs.MAX_REGISTERS`` (128) registers a thread and sits at
that cap; a change that keeps more live across its bookkeeping spills to local memory,
which cost a message 0.1 to 0.3 us on an H100 (BENCHMARKS.md, session 24), and nothing
on the simulator shows it. So each path's kernel is compiled here for sm_90 (NVVM, then
the machine's ``ptxas``) and its spills counted. Session 33's second preload of a block's
payload (to load a 32-thread block's 4 KiB before its bookkeeping) spilled 12 bytes in
gpu_push's kernel and 68 in host_staged's, and was not taken.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

from childenv import child_env

_SCRIPT = r"""
import os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
from numba import cuda, int64, uint32, uint64, types
from numba.cuda import dispatcher
# No GPU here: device functions ask the current device for its compute capability, so
# name sm_90's (NVVM compiles without a GPU).
class _Hopper:
    compute_capability = (9, 0)
dispatcher.get_current_device = lambda: _Hopper()
from gpuwrite.paths import kernels as K
u32, i64, u32_2d, i64_2d = uint32[::1], int64[::1], uint32[:, ::1], int64[:, ::1]
# QueueSet.device_args on a GPU, then runner.run's arrays, in send_messages' order.
Q = types.Tuple((u32_2d, u32_2d, uint64[::1], u32_2d, u32_2d, u32_2d, u32_2d, i64_2d, i64_2d,
                 i64_2d, u32_2d))
sig = (Q, i64_2d, i64, u32, i64, i64, i64, i64_2d, int64[:, :, ::1])
out = sys.argv[1]
for path in K.PATH_IDS:
    kernel = K.send_messages_for(path)
    fn = getattr(kernel, "py_func", None) or kernel.__wrapped__.py_func
    ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
    with open(os.path.join(out, path + ".ptx"), "w") as f:
        f.write(ptx)
"""

_VERSION = re.compile(r"current version is '(\d+\.\d+)'")


def _ptxas(ptx_path: str, out_dir: str) -> str:
    """ptxas -v of one PTX file at the kernels' register cap; its report (stderr)."""
    from gpuwrite.device.verbs import MAX_REGISTERS

    cmd = ["ptxas", "-arch=sm_90", "-v", f"--maxrregcount={MAX_REGISTERS}", ptx_path,
           "-o", os.path.join(out_dir, "k.cubin")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    m = _VERSION.search(p.stderr)
    if p.returncode != 0 and m:
        # NVVM (numba-cuda's, from pip) may write a newer PTX ISA version than this
        # machine's ptxas reads; the kernels use nothing of sm_90 past what that ptxas knows,
        # so the file is relabelled with the version it names and assembled again.
        with open(ptx_path) as f:
            text = f.read()
        with open(ptx_path, "w") as f:
            f.write(re.sub(r"^\.version \d+\.\d+", f".version {m.group(1)}", text, count=1,
                           flags=re.M))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.skip(f"this machine's ptxas cannot assemble numba's PTX: {p.stderr[-300:]}")
    return p.stderr


@pytest.mark.timeout(900)
def test_send_messages_does_not_spill_at_its_register_cap(tmp_path):
    if shutil.which("ptxas") is None:
        pytest.skip("no ptxas on this machine")
    p = subprocess.run([sys.executable, "-P", "-c", _SCRIPT, str(tmp_path)], capture_output=True,
                       text=True, env=child_env(NUMBA_ENABLE_CUDASIM="0"), timeout=600)
    if p.returncode != 0:
        if "NVVM" in p.stderr or "libnvvm" in p.stderr:
            pytest.skip("no NVVM on this machine to compile PTX with")
        pytest.fail(p.stderr[-2000:])
    from gpuwrite.paths.kernels import PATH_IDS
    from gpuwrite.device.verbs import MAX_REGISTERS
    for path in PATH_IDS:
        report = _ptxas(str(tmp_path / f"{path}.ptx"), str(tmp_path))
        lines = "; ".join(ln.strip() for ln in report.splitlines() if "spill" in ln or "Used" in ln)
        spills = [int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)]
        assert spills and not any(spills), f"{path} spills at {MAX_REGISTERS} registers: {lines}"
        used = [int(x) for x in re.findall(r"Used (\d+) registers", report)]
        assert used and max(used) <= MAX_REGISTERS, f"{path}: {lines}"
