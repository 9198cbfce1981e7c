"""Session 35: where does the cp.async push_mid's 1 KiB cost come from?

Session 34 (calls 8 and 9) measured the cp.async push_mid (CPA) against the code before it
(CUR): 256 B 0.06 to 0.22 us faster in every round, and 1 KiB with 256 threads, which never
enters push_mid (the first warp posts it), 0.1 us slower in every round; the SASS of that
warp path is the same but for register numbers. Two further variants part the candidate
causes:
- TAIL: CPA with its shared buffer declared after the QP's cached state, so that the
  state's shared-memory offsets are CUR's (CPA moves them up by the buffer's 128 bytes);
- PAD: CUR with CPA's buffer declared where CPA has it and written once in push_mid's branch
  (so NVVM keeps it), no cp.async: CPA's shared-memory layout without its code.
Same-host A/B, one message in flight, sources evicted from L2 as in the sweep, the order
rotating by round; CUR is built from ``.wtdiag/main_verbs.py`` and
``.wtdiag/main_kernels.py`` (``git show 78a4e7b:gpuwrite/device/verbs.py`` and the same for
gpuwrite/paths/kernels.py, the code before the change); CPA is this tree's (main since
session 35).
Usage: python3 benchmarks/scripts/mid_cp_async_layout_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import run_rounds
from mid_preload_ab import gpu_push_kernel, replace_once

from gpuwrite.device import verbs as V
from gpuwrite.paths import kernels as K

_CPA_BUF = """        if SIMULATOR:
            mid = cuda.shared.array(MID_BUF_WORDS, dtype=uint32)
        else:
            mid = cuda.shared.array(MID_BUF_WORDS, dtype=uint32, alignment=16)
"""
_STATE = "        sh_info = cuda.shared.array(QP_INFO_SHAPE, dtype=int64)\n"
_SH = "        sh = cuda.shared.array(4, dtype=int64)\n"
_MID_CALL = "                            status = dv.push_mid("


def sources() -> dict:
    """Each variant's (verbs.py, kernels.py) source text."""
    cur = (open(".wtdiag/main_verbs.py").read(), open(".wtdiag/main_kernels.py").read())
    cpa = (open(V.__file__).read(), open(K.__file__).read())
    tail = replace_once(cpa[1], _CPA_BUF, "")
    tail = replace_once(tail, _STATE, _STATE + _CPA_BUF)
    pad = replace_once(cur[1], _SH, _SH + _CPA_BUF)
    pad = replace_once(pad, "from numba import int64\n", "from numba import int64, uint32\n")
    pad = replace_once(pad, "\n\ndef _send_messages(", "\n\nMID_BUF_WORDS = 32\n\n\ndef _send_messages(")
    pad = replace_once(pad, _MID_CALL, "                            mid[0] = n\n" + _MID_CALL)
    return {"CUR": cur, "CPA": cpa, "TAIL": (cpa[0], tail), "PAD": (cur[0], pad)}


def kernels() -> dict:
    return {name: gpu_push_kernel(v, k, name.lower()) for name, (v, k) in sources().items()}


def main(out_path: str, rounds: int = 6) -> None:
    evicted = {"source_l2": "evicted"}
    built = {name: (kern, evicted) for name, kern in kernels().items()}
    # The order rotates by round: each variant goes first, second, ... alike.
    run_rounds(built, {n: list(built) for n in (256, 1024)}, out_path, rounds=rounds,
               rotate=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6)
