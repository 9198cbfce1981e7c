"""Session 35: does gpu_push's block path need its second barrier?

A block-path push (gpu_push above WARP_PUSH_BYTES, or any size in a block of one warp above
what the first warp posts) takes three block barriers: after thread 0's reservation (the
block reads its outcome from shared memory), right after that read (so thread 0 cannot
write the next outcome over it), and after the payload's copy (before thread 0's WQE and
doorbell). For gpu_push and host_staged the third already separates every thread's read
from thread 0's next write, so the second is only needed on the paths with no barrier
after the copy (nic_pull, inline). Same-host A/B: send_messages for gpu_push as committed
(CUR) and without the second barrier (NOB), one message in flight, sources evicted from L2
as in the sweep, 4 to 64 KiB, 32 and 256 threads, the order alternating by round.
Usage: python3 benchmarks/scripts/block_barrier_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import run_rounds
from mid_preload_ab import gpu_push_kernel, replace_once

from gpuwrite.device import verbs as V
from gpuwrite.paths import kernels as K

_SECOND = ("                cuda.syncthreads()  # every thread has read sh before thread 0 writes "
           "it again\n")
_ONLY_WITHOUT_THIRD = ("                if path == PULL or path == INLINE:\n"
                       "    " + _SECOND)


def without_second_barrier():
    src = replace_once(open(K.__file__).read(), _SECOND, _ONLY_WITHOUT_THIRD)
    return gpu_push_kernel(open(V.__file__).read(), src, "nob")


def main(out_path: str, rounds: int = 6) -> None:
    evicted = {"source_l2": "evicted"}
    kernels = {"CUR": (K._send_messages(K.PATH_IDS["gpu_push"]), evicted),
               "NOB": (without_second_barrier(), evicted)}
    run_rounds(kernels, {n: ["CUR", "NOB"] for n in (4096, 16384, 65536)}, out_path,
               rounds=rounds, messages=lambda size: 2000 if size <= 16384 else 1000,
               alternate=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6)
