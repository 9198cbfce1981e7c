"""Session 34: push_mid reading its last 128 bytes by cp.async before its bookkeeping.

In main since session 35 (``78a4e7b`` is the commit before it). Write the code before it to
``.wtdiag`` first: ``git show 78a4e7b:gpuwrite/device/verbs.py > .wtdiag/main_verbs.py`` and
the same for gpuwrite/paths/kernels.py into ``.wtdiag/main_kernels.py``. Same-host A/B,
one message in flight, sources evicted from L2 as in the sweep, five rounds in turn:
send_messages for gpu_push as on main before the change (CUR: push_mid
reads bytes 128 to 256 after its reservation; built from ``.wtdiag/main_verbs.py`` and
``.wtdiag/main_kernels.py``) and this tree's (CPA: they are read into shared memory by
cp.async before it). 64 B (push_small, a control), 128, 192 and 256 B (push_mid) and 1 KiB
(the first warp's path, a control), 32 and 256 threads.
Usage: python3 benchmarks/scripts/mid_cp_async_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import run_rounds
from mid_preload_ab import gpu_push_kernel

from gpuwrite.paths import kernels as K


def before():
    return gpu_push_kernel(open(".wtdiag/main_verbs.py").read(),
                           open(".wtdiag/main_kernels.py").read(), "before")


def main(out_path: str, rounds: int = 5) -> None:
    evicted = {"source_l2": "evicted"}
    kernels = {"CUR": (before(), evicted),
               "CPA": (K._send_messages(K.PATH_IDS["gpu_push"]), evicted)}
    # The order alternates by round (call 7 ran CUR first in every round).
    run_rounds(kernels, {n: ["CUR", "CPA"] for n in (64, 128, 192, 256, 1024)}, out_path,
               rounds=rounds, alternate=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5)
