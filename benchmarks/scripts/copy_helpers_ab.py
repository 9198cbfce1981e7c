"""The engine's copy helpers, how many a split delivery waits for (session 25): gpu_push and
host_staged, one message in flight, 32 KiB to 1 MiB, 32 and 256 threads, with 6 (the
default on a 16-CPU host), 3 and 2 copy helpers (``Context(copy_threads=...)``; a delivery
of at least 32 KiB is split into at most helpers + 1 pieces of at least 8 KiB), three
rounds in turn. p50 us and the engine's mean turnaround.
Usage: python3 benchmarks/scripts/copy_helpers_ab.py OUT.jsonl"""
import json
import sys

from gpuwrite.bench.suite import engine_split_us
from gpuwrite.host.verbs import Context
from gpuwrite.paths import runner


def main(out_path: str) -> None:
    out = open(out_path, "w")
    for rnd in range(3):
        for path in ("gpu_push", "host_staged"):
            for th in (32, 256):
                for size in (32768, 65536, 131072, 262144, 1 << 20):
                    for helpers in (6, 3, 2):
                        with Context(copy_threads=helpers) as ctx:
                            r = runner.run(path, [size] * (60 if size <= 65536 else 30), n_qps=1,
                                           wait_each=True, block_threads=th, context=ctx,
                                           chunk_bytes=max(size, 65536),
                                           stage_slot_bytes=4096 if size > 65536 else 256)
                        assert r.delivered == r.messages
                        row = dict(round=rnd, path=path, threads=th, size=size, helpers=helpers,
                                   p50=r.latency_p50_us, engine=engine_split_us(r)["engine"],
                                   copies_split=r.counters["copies_split"])
                        out.write(json.dumps(row) + "\n")
                        out.flush()
                        print(row, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
