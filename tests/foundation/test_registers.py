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

import pytest
from sm90ptx import compile_sm90

from gpuwrite.device.verbs import MAX_REGISTERS

# Writes each path's send_messages, in every scope made for it, as PTX into the folder
# named by PTX_OUT.
_SCRIPT = r"""
from gpuwrite.paths import kernels as K
for scope, paths in K.SCOPE_PATHS.items():
    for path in paths:
        kernel = K.send_messages_for(path, scope)
        ptx, _ = cuda.compile_ptx(kernel.py_func, SEND, cc=(9, 0))
        name = path + ("" if scope == "block" else "-" + scope)
        with open(os.path.join(os.environ["PTX_OUT"], name + ".ptx"), "w") as f:
            f.write(ptx)
"""


_VERSION = re.compile(r"current version is '(\d+\.\d+)'")


def _ptxas(ptx_path: str, out_dir: str) -> str:
    """ptxas -v of one PTX file at the kernels' register cap; its report (stderr)."""
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
    compile_sm90(_SCRIPT, PTX_OUT=str(tmp_path))
    names = sorted(p.stem for p in tmp_path.glob("*.ptx"))
    assert len(names) == 7, names       # four paths; the one-thread kernels of all but nic_pull
    for path in names:
        report = _ptxas(str(tmp_path / f"{path}.ptx"), str(tmp_path))
        lines = "; ".join(ln.strip() for ln in report.splitlines() if "spill" in ln or "Used" in ln)
        spills = [int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)]
        assert spills and not any(spills), f"{path} spills at {MAX_REGISTERS} registers: {lines}"
        used = [int(x) for x in re.findall(r"Used (\d+) registers", report)]
        assert used and max(used) <= MAX_REGISTERS, f"{path}: {lines}"
    # push_mid (gpu_push), staged_mid (host_staged) and inline_mid (gpu_push_inline) read a
    # 129 to 256 B payload's bytes past 128 by cp.async (no registers held across the
    # bookkeeping) and wait for them before storing them; nic_pull's kernel has none.
    for path in names:
        ptx = (tmp_path / f"{path}.ptx").read_text()
        has = "cp.async.cg.shared.global" in ptx and "cp.async.wait_all" in ptx
        assert has == (path.split("-")[0] != "nic_pull"), path
