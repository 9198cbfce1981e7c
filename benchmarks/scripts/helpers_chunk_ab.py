"""Session 29: the engine's copy helpers (six, the default, against twelve) and a 1 MiB
message in halves or quarters, one message in flight.

chunk_ab.py found the sweep's largest messages "lost in: engine": after the block has
written a 1 MiB message (28 us at one block's 37.6 GB/s), the engine copies it with the
worker and six helpers in 14 to 20 us, where a 400 Gb/s link takes 21 and the model's NIC
forwards each packet as it arrives (cut-through) and so adds almost nothing. Sent as four
256 KiB WQEs, each rung when written, the engine copied one while the block wrote the next:
44 us against 57. Session 25 compared two, three and six helpers (six ahead from 128 KiB);
nobody had tried more on these 16-CPU hosts. Here, in turn on one host, gpu_push and
host_staged with 256 threads: copy_threads 6 and 12, each message whole and, at 1 MiB, in
halves and quarters.
Usage: python3 benchmarks/scripts/helpers_chunk_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import emit, timing
from gpuwrite.host.verbs import Context
from gpuwrite.paths import runner

PLAN = {65536: (65536,), 262144: (262144, 131072), 1 << 20: (1 << 20, 524288, 262144)}
HELPERS = (6, 12)


def main(out_path: str, rounds: int = 3) -> None:
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for path in ("gpu_push", "host_staged"):
                for size, chunks in PLAN.items():
                    count = max(40, min(400, 400 * 4096 // size))
                    for chunk in chunks:
                        for helpers in HELPERS:
                            ctx = Context(workers=1, copy_threads=helpers)
                            try:
                                r = runner.run(path, [size] * count, n_qps=1, wait_each=True,
                                               block_threads=256, chunk_bytes=chunk,
                                               stage_slot_bytes=4096 if size > 65536 else 256,
                                               context=ctx)
                            finally:
                                ctx.close()
                            assert r.delivered == r.messages, (path, size, chunk, helpers)
                            emit(out, round=rnd, path=path, size=size, chunk=chunk,
                                 helpers=helpers, **timing(r),
                                 split=r.counters.get("copies_split"))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
