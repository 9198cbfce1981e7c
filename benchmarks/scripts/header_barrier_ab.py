"""Session 27: does the block path's first barrier wait for thread 0's staging header?

``block_steps.py`` found 0.8 to 0.9 us from a block-path message's start to the end of
thread 0's reservation and the two barriers around its hand-off (4 and 16 KiB, 32 and 256
threads), where a 64-byte push reserves in 0.35. Thread 0 stores the 16-byte staging
header into host memory before the first barrier, and a block barrier after a store to
host memory cost 0.2 to 0.5 us on an H200 (BENCHMARKS.md, run 13). Variant H computes the
payload's word before the barrier and stores the header after it (while the block copies
the payload; the doorbell's release store still orders it before the WQE is fetched).
Same-host A/B, rounds in turn (``_ab.run_rounds``), gpu_push 1 to 64 KiB.
Usage: python3 benchmarks/scripts/header_barrier_ab.py OUT.jsonl [rounds]
"""
import sys
import types as pytypes

from _ab import run_rounds
from gpuwrite.paths import kernels as K

K_SRC = open(K.__file__).read()

BEFORE = """                    if st == 0 and path == PUSH:
                        st, first, slots = dv.stage_reserve(q, 0, n, timeout)
                        if st == 0:
                            word = dv.stage_header(q, 0, first, n, slots, state[0, dv.S_PI])
"""
AFTER = """                    if st == 0 and path == PUSH:
                        st, first, slots = dv.stage_reserve(q, 0, n, timeout)
                        if st == 0:
                            word = first + (dv.stage_lead(n, info[0, dv.I_SLOT_BYTES]) >> 2) \\
                                + dv._HDR_WORDS
"""
SECOND_BARRIER = """                cuda.syncthreads()  # every thread has read sh before thread 0 writes it again
"""
HEADER_LATE = SECOND_BARRIER + """                if tid == 0 and path == PUSH:
                    dv.stage_header(q, 0, first, n, slots, state[0, dv.S_PI])
"""
DECLARE = """                x = preload(src, src_word, n if pre else 0, tid, cuda.blockDim.x)
"""


def variant(v: str):
    s = K_SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    if v == "H":
        for old in (BEFORE, SECOND_BARRIER, DECLARE):
            assert s.count(old) == 1, old
        s = s.replace(BEFORE, AFTER).replace(SECOND_BARRIER, HEADER_LATE)
        s = s.replace(DECLARE, DECLARE + "                first = 0\n                slots = 0\n")
    mod = pytypes.ModuleType("hb_" + v)
    mod.__file__ = K.__file__
    exec(compile(s, K.__file__, "exec"), mod.__dict__)
    return mod._send_messages(K.PUSH)


if __name__ == "__main__":
    kernels = {v: variant(v) for v in ("A", "H")}
    sizes = (4096, 8192, 16384, 65536)
    run_rounds(kernels, {size: ("A", "H") for size in sizes}, sys.argv[1],
               rounds=int(sys.argv[2]) if len(sys.argv) > 2 else 5,
               messages=lambda size: 1000 if size <= 16384 else 400)
