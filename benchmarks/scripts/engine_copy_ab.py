"""Session 34: three ways to make the engine's delivery copy of 1 to 64 KiB cheaper.

The engine's store and forward of a pushed WQE (staging -> destination; one CPU core
below 32 KiB, the copy helpers from there) cost 2 to 3.6 times the 400 Gb/s wire it stands
for at 4 to 64 KiB on the H200 hosts (session 33). Not in main: apply
``engine_copy_variants.patch`` (``git apply benchmarks/scripts/engine_copy_variants.patch``,
then ``python3 csrc/ffi_build.py``), which adds two settings read from the environment when
an engine starts:
  * GW_COPY_PREFETCH="mode,ahead,min": every copy of min bytes or more asks for its source
    ``ahead`` bytes before it copies it, 1 KiB at a time (mode 1 prefetcht0, 2 prefetcht2,
    3 prefetchnta; +8 also prefetchw the destination of a cached copy). The hardware's L2
    streamer stops at each 4 KiB page, so a lone 4 to 16 KiB copy might run with few
    misses in flight. Mode 16 instead copies with an own loop of eight 16-byte loads, then
    eight cached stores (against glibc's memmove).
  * GW_COPY_PIECES="max_pieces,cached": a split copy in at most that many pieces, their
    stores through the cache (1) or streamed (0); with ``Context(copy_split_bytes=...)``
    below the default 32 KiB.
Variants run in turn on one host, one message in flight, three rounds.
Usage: python3 benchmarks/scripts/engine_copy_ab.py prefetch|split OUT.jsonl [rounds]
"""
import os
import sys

from _ab import emit, timing
from gpuwrite.host.verbs import Context
from gpuwrite.paths import runner

# name: (GW_COPY_PREFETCH, GW_COPY_PIECES, copy_split_bytes, the points: (path, size, threads))
_MID = [("gpu_push", s, 256) for s in (1024, 4096, 8192, 16384, 32768, 65536, 262144, 1 << 20)]
_MID += [("host_staged", s, 256) for s in (16384, 65536)]
_SPLIT = [("gpu_push", s, 256) for s in (4096, 8192, 16384, 32768, 65536)]
_SPLIT += [("gpu_push", 16384, 32), ("host_staged", 16384, 256)]
SETS = {
    "prefetch": ({"off": ("0", "0,0", None), "t0-4k": ("1,4096,1024", "0,0", None),
                  "t0-8k": ("1,8192,1024", "0,0", None), "t0-16k": ("1,16384,1024", "0,0", None),
                  "t2-8k": ("2,8192,1024", "0,0", None), "t0w-8k": ("9,8192,1024", "0,0", None)},
                 _MID),
    "split": ({"off": ("0", "0,0", None), "vec": ("16,0,1024", "0,0", None),
               "s8k2c": ("0", "2,1", 8192), "s8k2s": ("0", "2,0", 8192),
               "s8k4c": ("0", "4,1", 8192), "s16k2c": ("0", "2,1", 16384)},
              _SPLIT),
}


def main(which: str, out_path: str, rounds: int = 3) -> None:
    variants, plan = SETS[which]
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for path, size, th in plan:
                for name, (pf, pieces, split) in variants.items():
                    os.environ["GW_COPY_PREFETCH"] = pf
                    os.environ["GW_COPY_PIECES"] = pieces
                    ctx = Context(copy_split_bytes=split)
                    try:
                        n = 400 if size <= 65536 else 100
                        r = runner.run(path, [size] * n, context=ctx, n_qps=1, wait_each=True,
                                       block_threads=th, stage_slot_bytes=256)
                    finally:
                        ctx.close()
                    assert r.delivered == r.messages, (name, path, size)
                    emit(out, round=rnd, v=name, path=path, size=size, threads=th, **timing(r),
                         cached=r.counters.get("copies_cached"),
                         split=r.counters.get("copies_split"),
                         late=r.counters.get("copy_pieces_late"),
                         wait_ns=r.counters.get("copy_wait_ns"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3)
