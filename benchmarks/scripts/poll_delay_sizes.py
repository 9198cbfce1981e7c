"""Session 27: the first completion poll's pause against message size (gpu_push, one
message in flight). A wait for every WQE written pauses ``poll_delay_ns`` (default 300)
before its first poll; the poll is a chain of 1.1 to 1.3 us PCIe reads, so a completion
that lands just after a read was answered waits a whole read more. ``block_steps.py``
found the completion wait 1.6 us longer at 4 KiB than at 64 B, with the engine's share
only 0.4 us of it. Here the same sizes run with pauses of 300 to 1500 ns, in turn, each
held fixed (``poll_adapt=False``: since session 27 a QueueSet's pause adapts by default).
Usage: python3 benchmarks/scripts/poll_delay_sizes.py OUT.jsonl [rounds]
"""
import json
import sys

from gpuwrite.bench.suite import engine_split_us
from gpuwrite.paths import runner


def main(out_path: str, rounds: int = 3) -> None:
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for th in (32, 256):
                for size in (64, 1024, 4096, 16384, 65536):
                    for delay in (300, 600, 900, 1200, 1500):
                        r = runner.run("gpu_push", [size] * 1000, n_qps=1, wait_each=True,
                                       block_threads=th, stage_slot_bytes=256,
                                       poll_delay_ns=delay, poll_adapt=False)
                        assert r.delivered == r.messages
                        row = dict(round=rnd, size=size, threads=th, delay=delay,
                                   p50=r.latency_p50_us, engine=engine_split_us(r)["engine"])
                        out.write(json.dumps(row) + "\n")
                        out.flush()
                        print(row, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
