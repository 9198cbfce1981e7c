"""Session 40: where the 64-byte push loses the time its step breakdown does not show, and
what the engine's copy helpers give a 16 and 64 KiB delivery by piece size.

Part 1. In every bench file the breakdown kernel's whole round trip (``push_breakdown``:
one thread, the same verbs in push_small's order, ``total``) is 0.4 to 0.5 us shorter than
the 64-byte gpu_push of the same repeat (session 38's last bench: 2.88 to 2.94 us against
3.30 to 3.49). They differ in (a) the payload's source: the breakdown reads one 64-byte
line every time, the runner a new one per message; (b) the runner's bookkeeping (its
table, stamps, pend ring, end-of-message barrier). Here, in turn, 64-byte gpu_push and
host_staged through ``runner.run`` as the bench runs them, with each message's source as
uploaded (the bench), evicted from L2 first, and every message reading one of 64 lines
(hot: the workload's source words rewritten; the bytes then differ from the ones checked,
so only the latency is kept), beside the floor, the push's least and the breakdown.

Part 2. The engine splits a delivery of ``copy_split_bytes`` (32 KiB) or more between the
worker and its helpers, in pieces of at least a quarter of that. gpu_push 16 and 64 KiB
with 256 threads, one in flight, with copy_split_bytes 32, 16, 8 and 4 KiB: p50 and the
engine's mean turnaround (doorbell seen to CQE written).

Usage: python3 benchmarks/scripts/latency_gap_diag.py OUT.jsonl [rounds] [parts]
"""
import os
import sys

import numpy as np
from _ab import emit, timing

from gpuwrite.bench.breakdown import push_breakdown
from gpuwrite.bench.suite import copy_split_side, floor_pingpong_us, least_push_64B_us
from gpuwrite.cudaenv import SIMULATOR
from gpuwrite.host.verbs import Context
from gpuwrite.paths import kernels as K, runner, workload

N = int(os.environ.get("DIAG_N", 2000))
KW = dict(n_qps=1, wait_each=True, block_threads=32)
REAL_BUILD = workload.build


def hot_build(path, sizes, n_qps, seed):
    wl = REAL_BUILD(path, sizes, n_qps, seed)
    msgs = wl.msgs.copy()
    msgs[:, K.M_SRC_WORD] = (np.arange(len(msgs)) % 64) * 16
    return workload.Workload(msgs=msgs, qp_of=wl.qp_of, payload=wl.payload)


def part1(out, rnd):
    emit(out, part=1, round=rnd, v="floor", p50=round(floor_pingpong_us(N), 3))
    emit(out, part=1, round=rnd, v="least_push_64B", p50=round(least_push_64B_us(N), 3))
    if not SIMULATOR:
        b = push_breakdown(N)
        emit(out, part=1, round=rnd, v="breakdown", p50=round(b["total"] / 1e3, 3),
             steps={k: round(v) for k, v in b.items()})
    for path in ("gpu_push", "host_staged"):
        for v in ("as_uploaded", "evicted", "hot"):
            if v == "hot":
                runner.workload.build = hot_build
            try:
                r = runner.run(path, [64] * N, source_l2="evicted" if v == "evicted" else
                               "as_uploaded", **KW)
            finally:
                runner.workload.build = REAL_BUILD
            emit(out, part=1, round=rnd, v=f"{path}/{v}", delivered=r.delivered, **timing(r))


def part2(out, rnd):
    for split in (32768, 16384, 8192, 4096):
        with Context(copy_split_bytes=split) as ctx:
            for size in (16384, 65536):
                r = runner.run("gpu_push", [size] * max(100, 400 * 4096 // size) if not SIMULATOR else [size] * 3, n_qps=1,
                               wait_each=True, block_threads=256, context=ctx,
                               source_l2="evicted")
                emit(out, part=2, round=rnd, split=split, size=size, delivered=r.delivered,
                     copy=copy_split_side(r), **timing(r))


def main(argv):
    rounds = int(argv[1]) if len(argv) > 1 else 3
    parts = argv[2] if len(argv) > 2 else "12"
    for path in ("gpu_push", "host_staged"):
        runner.run(path, [64] * 50, **KW)
    with open(argv[0], "w") as out:
        for rnd in range(rounds):
            if "1" in parts:
                part1(out, rnd)
            if "2" in parts:
                part2(out, rnd)


if __name__ == "__main__":
    main(sys.argv[1:])
