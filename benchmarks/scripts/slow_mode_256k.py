"""Session 29: the 256 KiB slow mode of Fig. 9's table, and whether twelve copy helpers
bring it.

In the tables of `88e60eb`, two of three runs of gpu_push 256 KiB with 256 threads took
43.3 and 43.6 us (the third 15.2; the bench's sweep on the same host right after, 14.4 to
16.3), and the 32-thread points 39.8 to 41.4 against the bench's 28.6 to 32.2. The extra
28 us is about what one CPU thread takes to copy 256 KiB. Fig. 9 sends 220 messages a
run (its own source and destination each: 55 MiB), the bench 20 (5 MiB). Here, in turn:
gpu_push and host_staged at 256 KiB, 256 and 32 threads, 6 and 12 helpers, 20 and 220
messages, with each run's engine turnaround and split copies.
Usage: python3 benchmarks/scripts/slow_mode_256k.py OUT.jsonl [rounds]
"""
import sys

from _ab import emit, timing
from gpuwrite.host.verbs import Context
from gpuwrite.paths import runner

SIZE = 262144


def main(out_path: str, rounds: int = 4) -> None:
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for th in (256, 32):
                for path in ("gpu_push", "host_staged"):
                    for count in (20, 220):
                        for helpers in (6, 12):
                            ctx = Context(workers=1, copy_threads=helpers)
                            try:
                                r = runner.run(path, [SIZE] * count, n_qps=1, wait_each=True,
                                               block_threads=th, chunk_bytes=SIZE,
                                               stage_slot_bytes=4096, context=ctx)
                            finally:
                                ctx.close()
                            assert r.delivered == r.messages
                            lat = sorted(r.latencies_ns) if r.latencies_ns is not None else []
                            emit(out, round=rnd, path=path, threads=th, count=count,
                                 helpers=helpers, **timing(r),
                                 p10=round(lat[len(lat) // 10] / 1e3, 2) if len(lat) else None,
                                 p90=round(lat[9 * len(lat) // 10] / 1e3, 2) if len(lat) else None,
                                 split=r.counters.get("copies_split"))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
