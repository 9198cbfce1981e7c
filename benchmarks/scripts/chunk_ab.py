"""Session 29: one message in flight, sent as one WQE or as several, each rung when written.

The bench's latency sweep sends every message as one WQE (``chunk_bytes=max(size, 64 KiB)``),
because in session 7 a 1 MiB gpu_push split into 64 KiB WQEs took 106 to 113 us against
71: each doorbell's system-scope release waited for the block's payload stores to drain.
The copy, the doorbell and the engine have all changed since. One WQE is store and forward
twice over: the block writes all of it, then the engine copies all of it (16.5 us at 1 MiB
in session 28's bench, after the block's 28). Split, the engine copies a piece while the
block writes the next, as a NIC sends one WQE while the next is written. Here, in turn on
one host, for gpu_push and host_staged at 32 and 256 threads: the whole message as one WQE
against pieces of each size listed.
Usage: python3 benchmarks/scripts/chunk_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import emit, timing
from gpuwrite.paths import runner

# message size -> WQE sizes tried (the first: the whole message, the sweep's way).
PLAN = {
    16384: (16384, 8192),
    65536: (65536, 32768, 16384),
    262144: (262144, 65536, 32768),
    1 << 20: (1 << 20, 262144, 131072, 65536),
}


def main(out_path: str, rounds: int = 3) -> None:
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for th in (256, 32):
                for path in ("gpu_push", "host_staged"):
                    for size, chunks in PLAN.items():
                        count = max(40, min(400, 400 * 4096 // size))
                        for chunk in chunks:
                            r = runner.run(path, [size] * count, n_qps=1, wait_each=True,
                                           block_threads=th, chunk_bytes=chunk,
                                           stage_slot_bytes=4096 if size > 65536 else 256)
                            assert r.delivered == r.messages, (path, size, chunk)
                            emit(out, round=rnd, path=path, size=size, threads=th, chunk=chunk,
                                 **timing(r), doorbells=r.counters.get("doorbells"))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
