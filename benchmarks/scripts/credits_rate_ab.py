"""Session 28: staging credits from completions (the default since session 28) against
the status line, at the bench's 64-byte rate and 1 MiB bandwidth, in turn on one host.
With credits from completions, a pushed WQE asks for a completion once a quarter of its
staging ring has been claimed since the last one that did (``dv.stage_signal``); the
bench's rate posts a doorbell and asks a completion every 16 messages anyway, and its
1 MiB WQEs take more than a quarter of the ring each. Runs 23 to 25 measured the two
level; this repeats it with the code of session 28.
Usage: python3 benchmarks/scripts/credits_rate_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import emit
from gpuwrite.bench import suite
from gpuwrite.paths import runner


def main(out_path: str, rounds: int = 5) -> None:
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for credits in ("status", "completions"):
                r = runner.run("gpu_push", [64] * (256 * 2000), n_qps=256, batch=suite.RATE_BATCH,
                               block_threads=32, workers=suite.RATE_WORKERS,
                               stage_credits=credits)
                assert r.delivered == r.messages
                row = dict(kind="rate", round=rnd, credits=credits,
                           mpps=round(suite.message_rate_mpps(r), 1))
                emit(out, **row)
                r = runner.run("gpu_push", [1 << 20] * 1024, stage_credits=credits,
                               **suite.BANDWIDTH_RUN["gpu_push"])
                assert r.delivered == r.messages
                row = dict(kind="bandwidth", round=rnd, credits=credits,
                           gbytes=round(r.throughput_gbps / 8, 1))
                emit(out, **row)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5)
