"""Session 35: how far should one thread push, now that push_mid reads every byte before its
bookkeeping?

Until session 35 push_mid (one thread, whole aligned 16-byte words of 65 to 256 B) read its
bytes past 128 after its bookkeeping, so a larger payload would have waited a GPU-memory
read per 128 bytes, and 257 B to 2 KiB went to the first warp (its lanes load theirs in
one round). With the bytes past 128 read by ``cp.async`` into shared memory before the
bookkeeping, one thread reads any size in one round; what it pays is one 16-byte store
after another. Same-host A/B: send_messages for gpu_push as committed (M256) and with
push_mid taking up to 512 (M512) or 1024 bytes (M1024; the shared buffer grows with it,
and the check that a one-thread payload takes no 128-byte alignment lead is dropped:
``stage_header`` returns the payload's word either way), 256 B to 1 KiB, 32 and 256
threads, sources evicted from L2 as in the sweep, the order rotating by round.
M128 (push_mid up to 128 bytes: its registers only, no ``cp.async``, the warp from 129 B)
asks the opposite question: whether less code in the kernel is worth more than one thread
at 129 to 256 B.
Usage: python3 benchmarks/scripts/mid_size_ab.py OUT.jsonl [rounds] [SIZES] [VARIANTS]
(SIZES and VARIANTS comma-separated; default 256,512,1024 and M256,M128,M512,M1024.)
"""
import sys

from _ab import run_variants
from mid_preload_ab import gpu_push_kernel, replace_once

from gpuwrite.device import verbs as V
from gpuwrite.paths import kernels as K

_LIMIT = "MID_PUSH_BYTES = 256\n"
_CHECK = """if MID_PUSH_BYTES >= _ALIGN_MIN:
    raise ImportError("push_small and push_mid assume their payloads take no alignment lead")
"""


def with_limit(nbytes: int):
    src = replace_once(open(V.__file__).read(), _LIMIT, f"MID_PUSH_BYTES = {nbytes}\n")
    src = replace_once(src, _CHECK, "")
    return gpu_push_kernel(src, open(K.__file__).read(), f"mid{nbytes}")


def kernels() -> dict:
    """Each variant's builder: M256 is the package's kernel, MN push_mid up to N bytes."""
    return {"M256": lambda: K._send_messages(K.PATH_IDS["gpu_push"]),
            **{f"M{n}": (lambda n=n: with_limit(n)) for n in (128, 512, 1024)}}


if __name__ == "__main__":
    run_variants(kernels(), sys.argv[1:], (256, 512, 1024))
