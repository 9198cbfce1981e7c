"""Session 28: deliveries into a region that fits the host's cache, stored through it.

The engine streams (non-temporal stores) every delivery of 4 KiB or more. Where the
destination region is small enough to stay in the host's last-level cache, a streaming
store writes its lines back to DRAM that a cached store would have found in the cache:
session 15 measured a lone 16 KiB delivery 0.9 us cheaper with ordinary stores, and
session 16 saw throughput fall 4 to 10 % when they were used for a 256 MiB destination.
``Context(cached_dst_max_bytes=...)`` now stores through the cache the deliveries under
32 KiB into regions no larger than that (default: an eighth of the L3). Here, in turn on
one host, streaming everything (S: ``cached_dst_max_bytes=0``, the engine before) and
the default (C):
  * latency, one message in flight, as the bench's sweep and Fig. 9 run it;
  * throughput as Fig. 4 runs it (32 QPs, 8 workers), into 16 MiB (C stores through the
    cache) and into 256 MiB (both stream: a control).
Usage: python3 benchmarks/scripts/cached_store_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import emit
from gpuwrite.bench.suite import engine_split_us
from gpuwrite.host.verbs import Context
from gpuwrite.paths import runner

VARIANTS = {"S": 0, "C": None}


def one(name, path, size, n, **kw):
    workers = kw.pop("workers", 1)
    ctx = Context(workers=workers, cached_dst_max_bytes=VARIANTS[name])
    try:
        r = runner.run(path, [size] * n, context=ctx, **kw)
    finally:
        ctx.close()
    assert r.delivered == r.messages, (name, path, size)
    return r


def main(out_path: str, rounds: int = 3) -> None:
    print("cached_dst_max_bytes by default:", Context().cached_dst_max_bytes, flush=True)
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for th in (32, 256):
                for path in ("gpu_push", "host_staged"):
                    for size in (4096, 8192, 16384, 32768):
                        for name in VARIANTS:
                            r = one(name, path, size, 400, n_qps=1, wait_each=True,
                                    block_threads=th, chunk_bytes=65536, stage_slot_bytes=256)
                            emit(out, kind="latency", round=rnd, v=name, path=path, size=size,
                                 threads=th, p50=round(r.latency_p50_us, 2),
                                 engine=round(engine_split_us(r)["engine"], 2),
                                 cached=r.counters.get("copies_cached"))
            for total in (16 << 20, 256 << 20):
                for path in ("gpu_push", "host_staged"):
                    for size in (4096, 16384):
                        for name in VARIANTS:
                            r = one(name, path, size, total // size, n_qps=32, batch=4,
                                    block_threads=256, workers=8, chunk_bytes=1 << 20,
                                    stage_slot_bytes=4096)
                            emit(out, kind="throughput", round=rnd, v=name, path=path,
                                 size=size, total_mib=total >> 20,
                                 gbps=round(r.throughput_gbps, 1),
                                 cached=r.counters.get("copies_cached"))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
