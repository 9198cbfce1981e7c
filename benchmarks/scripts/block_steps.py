"""Session 27: where the block path (gpu_push, 4 KiB and up) spends its time, step by step.

Session 25 split the block path's latency at the doorbell only (``mid_sizes.py`` E4: 1.8
us before it at 4 and 16 KiB with 256 threads, where a 64-byte push takes 0.5). Here each
variant of ``send_messages`` restarts the message's clock (``t_post``) at a later point
of the block path, so the differences between their p50s are the steps between:

  A    as committed: the clock starts once the message's row is read
  R    after thread 0's reservation and the two block barriers around its hand-off
  C    after the block's payload stores and the barrier behind them
  D    just before the doorbell (after thread 0's WQE), as E4's B
  W    just after the doorbell record and register stores (the completion wait alone)

A - R: reservation and hand-off; R - C: the copy into staging and its barrier; C - D:
the WQE; D - W: the doorbell's release store (it waits for the block's stores); W: the
engine and the completion poll. Also the engine's turnaround (``engine_split_us``).
Each variant is today's source with one stamp added, compiled on its own; all run in
turn, one message in flight, 3 rounds.
Usage: python3 benchmarks/scripts/block_steps.py OUT.jsonl [rounds]
"""
import sys
import types as pytypes

from _ab import run_rounds

from gpuwrite.bench.suite import engine_split_us
from gpuwrite.paths import kernels as K

K_SRC = open(K.__file__).read()
STAMP = "t_post[m] = globaltimer_ns()"

# (text the stamp goes after, its indentation) for each variant
AFTER = {
    "R": ("                cuda.syncthreads()  # every thread has read sh before thread 0 "
          "writes it again\n", 16),
    "C": ("                        copy_bytes(ring, word, src, src_word, n, tid, "
          "cuda.blockDim.x)\n                    cuda.syncthreads()\n", 20),
    "D": ("            if status == 0 and end_of_batch and tid == 0:\n", 16),
    "W": ("            if status == 0 and end_of_batch and tid == 0:\n"
          "                dv.flush_doorbell(q, 0)\n", 16),
}


def variant(v: str):
    s = K_SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    if v != "A":
        anchor, indent = AFTER[v]
        assert s.count(anchor) == 1, v
        guard = "" if v in ("D", "W") else "if tid == 0:\n" + " " * (indent + 4)
        s = s.replace(anchor, anchor + " " * indent + guard + STAMP + "\n")
    mod = pytypes.ModuleType("bs_" + v)
    mod.__file__ = K.__file__
    exec(compile(s, K.__file__, "exec"), mod.__dict__)
    return mod._send_messages(K.PUSH)


def main(out_path: str, rounds: int = 3) -> None:
    kernels = {v: variant(v) for v in ("A", "R", "C", "D", "W")}
    run_rounds(kernels, {size: tuple(kernels) for size in (4096, 16384, 65536)}, out_path,
               rounds=rounds, messages=lambda size: 1000,
               extra=lambda r: {"engine": engine_split_us(r)["engine"]})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
