"""Benchmark of the fast simulator against the SimPy reference, side by side in one run.

    python -m gpuwrite.model.bench [--json] [--messages N] [--reference-messages N]

Workload: gpu_push with the ``hold`` policy, network credits that run out (a 64 KiB VL
buffer), a receiver that stalls 25 % of the time, 16 QPs with 8 messages outstanding
each, sizes drawn from 64 B to 16 KiB. The process is pinned to one CPU core. The fast
core is timed on N messages (after compilation and one untimed run, whose time is
reported: the first touch of its arrays) and on the reference's small workload; the
SimPy reference runs the small workload; both must agree message by message. The same is
done with the round_robin scheduler (its own event-loop core).
Messages are cut into packets (16 KiB messages are four), each with its own credits.
Every timing is repeated (``--repeats``) and reported as min / median / max, because the
machine may be shared. Targets (issue 13), judged on the slowest repeat: >= 5 million
messages/s, >= 200x the reference.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

from gpuwrite.model import sim
from gpuwrite.model.params import Params, Workload
from gpuwrite.model.simpy_ref import run_simpy

TARGET_MESSAGES_PER_S = 5_000_000
TARGET_SPEEDUP = 200.0


def bench_params() -> Params:
    return Params().updated({
        "path": "gpu_push",
        "nic": {"policy": "hold", "staging_buffer_bytes": 256 * 1024},
        "network": {"vl_buffer_bytes": 64 * 1024},
        "receiver": {"stall_period_ns": 20_000.0, "stall_duration_ns": 5_000.0},
    })


def bench_workload(n_messages: int) -> Workload:
    return Workload(n_messages=n_messages, n_qps=16, outstanding=8, arrival="closed",
                    size_kind="choice", sizes_bytes=(64, 512, 4096, 16384), weights=(4, 2, 2, 1))


def _times(repeats: int, function, clock=time.perf_counter) -> list[float]:
    """Seconds of each of ``repeats`` calls (wall clock, or ``time.process_time``: this
    process's CPU time, which other processes on a shared machine disturb less)."""
    out = []
    for _ in range(repeats):
        start = clock()
        function()
        out.append(clock() - start)
    return out


def _best_of(repeats: int, function) -> float:
    return min(_times(repeats, function))


def _spread(count: int, seconds: list[float]) -> dict:
    """min / median / max rate (count per second) over the repeats."""
    rates = sorted(count / s for s in seconds)
    return {"min": rates[0], "median": float(np.median(rates)), "max": rates[-1]}


def pin_to_one_core() -> None:
    """Run on one CPU core, as the target says (numba's loop is single-threaded anyway)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def run(messages: int = 2_000_000, reference_messages: int = 20_000, seed: int = 1, repeats: int = 5) -> dict:
    params = bench_params()
    small = sim.prepare(params, bench_workload(reference_messages), seed)
    sim.run_fast(small)  # compile (or load the cache)

    big = sim.prepare(params, bench_workload(messages), seed)
    # The first run of a workload this large in a process pays the OS's first touch of its
    # output arrays (page faults, in CPU time too): 0.47 to 0.62 s for 2 M messages on the
    # 2-core development machine against 0.12 to 0.14 s for every later run, also on fresh
    # inputs (session 14). It is reported, and the repeats time the steady state.
    first_run_s = _times(1, lambda: sim.run_fast(big))[0]
    fast_times = _times(repeats, lambda: sim.run_fast(big))
    fast_s = float(np.median(fast_times))
    fast_cpu_times = _times(repeats, lambda: sim.run_fast(big), time.process_time)
    start = time.perf_counter()
    result = sim.simulate(params, bench_workload(messages), seed)
    end_to_end_s = time.perf_counter() - start
    fast_small_times = _times(repeats, lambda: sim.run_fast(small))
    fast_small_s = float(np.median(fast_small_times))

    # the same workload with the per-QP round-robin scheduler (an event loop, slower)
    fair_params = params.updated({"nic": {"scheduler": "round_robin"}})
    fair_small = sim.prepare(fair_params, bench_workload(reference_messages), seed)
    sim.run_fast(fair_small)
    fair_big = sim.prepare(fair_params, bench_workload(messages), seed)
    fair_s = _best_of(3, lambda: sim.run_fast(fair_big))
    fair_agree = all(np.array_equal(a, b) for a, b in zip(sim.run_fast(fair_small).values(),
                                                          run_simpy(fair_small).values()))

    references = []
    simpy_times = _times(max(1, repeats // 2), lambda: references.append(run_simpy(small)))
    simpy_s = float(np.median(simpy_times))
    reference = references[0]
    fast_small = sim.run_fast(small)
    agree = all(np.array_equal(fast_small[key], reference[key]) for key in fast_small)

    fast_rate = messages / fast_s
    fast_small_rate = reference_messages / fast_small_s
    simpy_rate = reference_messages / simpy_s
    summary = result.summary
    rate_spread = _spread(messages, fast_times)
    speedup_spread = {"min": reference_messages / max(fast_small_times) / (reference_messages / min(simpy_times)),
                      "median": fast_small_s and simpy_s / fast_small_s,
                      "max": reference_messages / min(fast_small_times) / (reference_messages / max(simpy_times))}
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'} used",
        "python": platform.python_version(),
        "workload": "gpu_push, hold, 64 KiB credits, receiver stalls 5/20 us, 16 QPs x 8 outstanding, 64 B-16 KiB",
        "messages": messages,
        "packets": int(big.n_packets),
        "repeats": repeats,
        "fast_messages_per_s_spread": rate_spread,
        "fast_messages_per_cpu_s_spread": _spread(messages, fast_cpu_times),
        "fast_small_messages_per_s_spread": _spread(reference_messages, fast_small_times),
        "simpy_messages_per_s_spread": _spread(reference_messages, simpy_times),
        "speedup_spread": speedup_spread,
        "fast_first_run_s": first_run_s,
        "fast_core_s": fast_s,
        "fast_messages_per_s": fast_rate,
        "fast_end_to_end_s": end_to_end_s,
        "fast_end_to_end_messages_per_s": messages / end_to_end_s,
        "reference_messages": reference_messages,
        "fast_small_messages_per_s": fast_small_rate,
        "simpy_s": simpy_s,
        "simpy_messages_per_s": simpy_rate,
        "speedup_same_workload": fast_small_rate / simpy_rate,
        "speedup_vs_large_run": fast_rate / simpy_rate,
        "agree": bool(agree),
        "round_robin_messages_per_s": messages / fair_s,
        "round_robin_agree": bool(fair_agree),
        "target_messages_per_s": TARGET_MESSAGES_PER_S,
        "target_speedup": TARGET_SPEEDUP,
        # Every repeat is judged, not the median: the slowest against the target.
        "meets_rate": rate_spread["min"] >= TARGET_MESSAGES_PER_S,
        "meets_speedup": speedup_spread["min"] >= TARGET_SPEEDUP,
        "sim_throughput_gbps": float(summary["throughput_gbps"]),
        "sim_latency_p99_ns": float(summary["latency_p99_ns"]),
        "sim_staging_peak_bytes": int(summary["staging_peak_bytes"]),
        "sim_dropped": int(summary["dropped"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuwrite.model.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--reference-messages", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5, help="timings per figure (min/median/max reported)")
    args = parser.parse_args(argv)
    for name in ("messages", "reference_messages", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)} is not allowed; allowed: an integer >= 1")
    pin_to_one_core()
    figures = run(args.messages, args.reference_messages, args.seed, args.repeats)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="gpuwrite model: fast simulator vs SimPy reference")
        table.add_column("figure")
        table.add_column("value", justify="right")
        spread = figures["fast_messages_per_s_spread"]
        table.add_row("fast core, messages/s (min / median / max)",
                      f"{spread['min']:,.0f} / {spread['median']:,.0f} / {spread['max']:,.0f} ({figures['messages']:,} msgs)")
        cpu = figures["fast_messages_per_cpu_s_spread"]
        table.add_row("fast core, messages per CPU second (min / median / max)",
                      f"{cpu['min']:,.0f} / {cpu['median']:,.0f} / {cpu['max']:,.0f}")
        table.add_row("fast end to end (prepare + run), messages/s", f"{figures['fast_end_to_end_messages_per_s']:,.0f}")
        table.add_row("fast core on the reference workload, messages/s", f"{figures['fast_small_messages_per_s']:,.0f}")
        table.add_row("SimPy reference, messages/s", f"{figures['simpy_messages_per_s']:,.0f} ({figures['reference_messages']:,} msgs)")
        table.add_row("speedup, same workload", f"{figures['speedup_same_workload']:,.0f}x (target {TARGET_SPEEDUP:g}x)")
        table.add_row("per-message times identical", str(figures["agree"]))
        table.add_row("round_robin scheduler, fast core, messages/s", f"{figures['round_robin_messages_per_s']:,.0f}")
        table.add_row("round_robin identical to its reference", str(figures["round_robin_agree"]))
        speedup = figures["speedup_spread"]
        table.add_row("speedup min / median / max", f"{speedup['min']:,.0f} / {speedup['median']:,.0f} / {speedup['max']:,.0f}")
        table.add_row(f"meets {TARGET_MESSAGES_PER_S / 1e6:g}M msgs/s", str(figures["meets_rate"]))
        table.add_row(f"meets {TARGET_SPEEDUP:g}x", str(figures["meets_speedup"]))
        Console().print(table)
    return 0 if figures["agree"] and figures["round_robin_agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
