"""Session 28: does the staging ring's credit read sit on the latency path at 1 to 16 KiB?

With ``stage_credits="status"`` (the runner's default) a push learns which staging slots
the NIC has freed only by reading the NIC's status line, a PCIe read of 1.1 to 1.3 us,
and only when the slots it has seen freed run out. The latency sweep's ring holds four
of its largest messages (``runner.run``: ``max(64, 4 x slots a message needs)``), so
every fourth message of 4 KiB or more reads it before its doorbell. Here, in turn on one
host: the sweep's ring (A), a ring of 64 such messages (B), and credits that come back
with the completions the wait already reads (C, ``stage_credits="completions"``). Each
row: p50, mean, and the median latency of messages by their index modulo 4.
Usage: python3 benchmarks/scripts/stage_credit_ab.py OUT.jsonl [rounds]
"""
import sys

import numpy as np
from _ab import emit

from gpuwrite import layouts as L
from gpuwrite.paths import runner


def variants(size: int) -> dict:
    need = L.stage_slots_needed(size, 256)
    return {"A": {}, "B": dict(stage_slots=64 * need), "C": dict(stage_credits="completions")}


def main(out_path: str, rounds: int = 3) -> None:
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for th in (32, 256):
                for size in (1024, 4096, 16384, 65536):
                    for name, kw in variants(size).items():
                        r = runner.run("gpu_push", [size] * 1000, n_qps=1, wait_each=True,
                                       block_threads=th, stage_slot_bytes=256, **kw)
                        assert r.delivered == r.messages
                        lat = np.asarray(r.latencies_ns, dtype=float) / 1e3
                        by_mod = [round(float(np.median(lat[k::4])), 2) for k in range(4)]
                        row = dict(round=rnd, v=name, size=size, threads=th,
                                   p50=round(r.latency_p50_us, 2),
                                   mean=round(float(lat.mean()), 2), by_mod4=by_mod,
                                   status_reads=r.counters.get("stage_status_reads"))
                        emit(out, **row)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
