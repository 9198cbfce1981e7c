"""Session 37: host_staged's small and medium writes by one thread and the first warp.

Until session 37 every host_staged message took the block path (thread 0 reserves, a block
barrier, the block copies, a barrier after its stores to host memory, thread 0 writes the
WQE), where gpu_push posts up to 256 B from one thread and up to 2 KiB from the first
warp: on session 36's H200 a 64-byte host_staged write took 3.71 to 3.74 us against
gpu_push's 3.36 to 3.42, though in emulated mode the two write host memory the same way.
Same-host A/B, one message in flight, sources evicted from L2 as in the sweep, the order
rotating by round: host_staged as committed (STG: ``dv.staged_small``, ``dv.staged_mid``,
the first warp), host_staged with the block path at every size (BLK: the kernel as it was
before), and gpu_push as committed (PUSH, the reference), 64 B to 4 KiB (4 KiB: the block
path in all three), 32 and 256 threads.
Usage: python3 benchmarks/scripts/staged_small_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import run_rounds
from mid_preload_ab import _module, replace_once

from gpuwrite.paths import kernels as K


def block_path_staged():
    """send_messages for host_staged with the block path at every size, as before."""
    src = open(K.__file__).read()
    for a, b in (("                pushed = path == PUSH or path == STAGED\n",
                  "                pushed = path == PUSH\n"),
                 ("                small = path != PULL and dv.small_ok(",
                  "                small = (path == PUSH or path == INLINE) and dv.small_ok("),
                 ("    @cached\n", "")):
        src = replace_once(src, a, b)
    return _module(src, "kernels_blk", K.__file__)._send_messages(K.STAGED)


def main(out_path: str, rounds: int = 4) -> None:
    evicted = {"source_l2": "evicted"}
    kernels = {"STG": (K._send_messages(K.STAGED), dict(evicted, path="host_staged")),
               "BLK": (block_path_staged(), dict(evicted, path="host_staged")),
               "PUSH": (K._send_messages(K.PUSH), evicted)}
    names = list(kernels)
    run_rounds(kernels, {n: names for n in (64, 128, 256, 1024, 2048, 4096)}, out_path,
               rounds=rounds, rotate=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)
