"""Session 40: send_messages made for tables of one-thread messages (``alone``: every thread
but 0 leaves at once, no barrier per message; ``kernels.kernel_scope`` "thread") against the
general kernel on the same tables. In turn, one message in flight, the order alternating by
round: gpu_push and host_staged at 64, 128 and 256 bytes, gpu_push_inline at 64, with 32
and 256 threads (2000 messages each, sources as uploaded, as the bench's 64-byte latency);
then the 64-byte rate (256 QPs, batches of 16, blocks of 32, as the bench) of each.

Usage: python3 benchmarks/scripts/one_thread_kernel_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import emit

from gpuwrite.bench.suite import RATE_BATCH, RATE_WORKERS, message_rate_mpps
from gpuwrite.paths import kernels as K, runner

PLAN = {"gpu_push": (64, 128, 256), "host_staged": (64, 128, 256), "gpu_push_inline": (64,)}
REAL = K.send_messages_for


def run(path, sizes, forced, **kw):
    K.send_messages_for = lambda p, scope="block": REAL(p, "thread" if forced else "block")
    try:
        return runner.run(path, sizes, **kw)
    finally:
        K.send_messages_for = REAL


def main(argv):
    out_path = argv[0]
    rounds = int(argv[1]) if len(argv) > 1 else 3
    for path in PLAN:
        for forced in (False, True):
            run(path, [64] * 20, forced, n_qps=1, wait_each=True, block_threads=32)
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            order = (False, True) if rnd % 2 == 0 else (True, False)
            for th in (32, 256):
                for path, sizes in PLAN.items():
                    for size in sizes:
                        for forced in order:
                            r = run(path, [size] * 2000, forced, n_qps=1, wait_each=True,
                                    block_threads=th)
                            emit(out, round=rnd, v="alone" if forced else "general", path=path,
                                 size=size, threads=th, p50=round(r.latency_p50_us, 3),
                                 p99=round(r.latency_p99_us, 3), delivered=r.delivered)
            for forced in order:
                r = run("gpu_push", [64] * (256 * 2000), forced, n_qps=256, batch=RATE_BATCH,
                        block_threads=32, workers=RATE_WORKERS)
                emit(out, round=rnd, v="alone" if forced else "general", path="rate",
                     rate_mpps=round(message_rate_mpps(r), 1), delivered=r.delivered)


if __name__ == "__main__":
    main(sys.argv[1:])
