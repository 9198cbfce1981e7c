"""Session 35's lead for the next session: one inlined copy of gpu_push's bookkeeping.

push_reserve (the SQ and staging reservations with their waits and timeouts, the staging
header, the WQE) inlines to about 1,000 instructions per call site, and gpu_push's
send_messages held it four times (BENCHMARKS.md, session 35). ``one_site.patch`` (branch
``next/one-site``) gives gpu_push's one-thread pushes (1 to 256 B) and its first warp's
(to 2 KiB) one call site of it: push_mid split into ``mid_load`` (before the bookkeeping:
64 bytes into registers, the rest by ``cp.async`` into shared memory; 128 in registers
spilled 32 bytes at that shared site) and ``mid_store``, and push_small's payloads sent
through them too. gpu_push's kernel: 14,360 -> 11,832 instructions, no spill at 128
registers; the simulator's path, copy, register and API tests pass (105 passed), and
verbs.py's and kernels.py's mutation entries (the patch updates two) are all killed. Not
yet run on a GPU.

Apply the patch first (``git apply benchmarks/scripts/one_site.patch``) and write the code
before it to ``.wtdiag``: ``git show HEAD:gpuwrite/device/verbs.py > .wtdiag/main_verbs.py``
and the same for gpuwrite/paths/kernels.py into ``.wtdiag/main_kernels.py``. Same-host
A/B: CUR (before) and ONE (this tree), one message in flight, sources evicted from L2 as in
the sweep, 64 B (the latency target's size) to 4 KiB (192 B and 2 KiB: one thread's and
the warp's largest), 32 and 256 threads, the order alternating by round. A kernel change: if it is taken, the GPU tables are run again.
Usage: python3 benchmarks/scripts/one_site_ab.py OUT.jsonl [rounds]

Measured in session 36 (an H200, five rounds, ``h200-2026-11-28-session36-one-site.jsonl``;
the patch's dead lines after push_mid's return taken out first): ONE slower at every size
below 4 KiB, 64 B by 0.16 to 0.38 us in nine rounds of ten, 128 B by 0.38 to 0.64; not
merged (BENCHMARKS.md, session 36).
"""
import sys

from _ab import run_rounds
from mid_cp_async_ab import before

from gpuwrite.paths import kernels as K


def main(out_path: str, rounds: int = 4) -> None:
    evicted = {"source_l2": "evicted"}
    kernels = {"CUR": (before(), evicted),
               "ONE": (K._send_messages(K.PATH_IDS["gpu_push"]), evicted)}
    sizes = (64, 128, 192, 256, 1024, 2048, 4096)
    run_rounds(kernels, {n: ["CUR", "ONE"] for n in sizes}, out_path, rounds=rounds,
               alternate=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)
