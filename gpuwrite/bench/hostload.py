"""What the host's CPUs did besides a run: time the hypervisor gave to other guests, and how
often this process's threads were preempted.

The emulated NIC is threads of this process (the engine's workers and copy helpers) that
busy-poll and copy, so a run is slow whenever one of them does not get its CPU. Two ways it
may not, each read from the kernel before and after a run (no sampling thread, nothing
added to the timed span):

  * **steal**: time a virtual CPU was ready to run but the hypervisor ran something else
    (``/proc/stat``, the eighth number of each ``cpu`` line, in clock ticks: 10 ms each,
    so a run shorter than a few ticks shows it only in whole ticks);
  * **involuntary context switches** of every thread of this process, the engine's
    included after they have exited (``getrusage(RUSAGE_SELF).ru_nivcsw``, which Linux
    accumulates from exited threads): the guest's own scheduler took a CPU from one of
    them while it still wanted it.

The bench records both beside each run of its repeated figures, so a slow run can be told
apart as the host's (steal or preemption grew) or not, over two windows: the whole call it
wraps (for ``runner.run``: the context's set-up, the launch, the run and the byte check,
25 ms to 2 s), and, nested in it as ``kernel``, only the sending kernel's span, from just
before its launch to its end (``watched_run``), which holds the run's timed messages. The
kernel's span is often shorter than a tick, and Linux adds a vCPU's steal at its next tick,
so a kernel window shows steal in whole ticks, sometimes a tick late, sometimes none that
the whole call shows. Both are read from the Linux kernel
in a few hundred microseconds; elsewhere, or where ``/proc/stat`` cannot be read, a sample
holds ``None`` and the run's record says so. (The standard library reads both; psutil would
add a dependency for two numbers.)
"""
from __future__ import annotations

import contextlib
import os
import resource
import time
from dataclasses import dataclass

PROC_STAT = "/proc/stat"
STEAL_FIELD = 8          # user nice system idle iowait irq softirq steal ...
IRQ_FIELDS = (6, 7)      # irq, softirq


@dataclass(frozen=True)
class HostSample:
    """One reading: ``steal``/``irq`` per CPU in clock ticks (``None`` where /proc/stat
    cannot be read), this process's involuntary context switches, and the time."""
    t_s: float
    steal: tuple[int, ...] | None
    irq: tuple[int, ...] | None
    involuntary_switches: int


def _cpu_lines(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Steal and irq + softirq ticks of each ``cpuN`` line of /proc/stat's ``text``."""
    steal, irq = [], []
    for line in text.splitlines():
        f = line.split()
        if not f or not f[0].startswith("cpu") or f[0] == "cpu":
            continue
        vals = [int(x) for x in f[1:]]
        steal.append(vals[STEAL_FIELD - 1] if len(vals) >= STEAL_FIELD else 0)
        irq.append(sum(vals[i - 1] for i in IRQ_FIELDS if len(vals) >= i))
    return tuple(steal), tuple(irq)


def sample(stat_path: str = PROC_STAT) -> HostSample:
    """The host's counters now."""
    try:
        with open(stat_path) as f:
            steal, irq = _cpu_lines(f.read())
    except OSError:
        steal = irq = None
    return HostSample(time.monotonic(), steal, irq,
                      resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw)


def _tick_ms() -> float:
    try:
        return 1e3 / os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 10.0


def between(before: HostSample, after: HostSample) -> dict:
    """What happened from ``before`` to ``after``: ``span_ms``; ``steal_ms`` summed over
    the CPUs and ``steal_max_cpu_ms`` of the CPU that lost most; ``irq_ms``; and
    ``involuntary_switches`` of this process's threads. Steal and irq are ``None`` where
    either sample lacks them."""
    out = {"span_ms": (after.t_s - before.t_s) * 1e3,
           "involuntary_switches": after.involuntary_switches - before.involuntary_switches,
           "steal_ms": None, "steal_max_cpu_ms": None, "irq_ms": None}
    if before.steal is not None and after.steal is not None \
            and len(before.steal) == len(after.steal):
        tick = _tick_ms()
        d = [a - b for a, b in zip(after.steal, before.steal)]
        out["steal_ms"] = sum(d) * tick
        out["steal_max_cpu_ms"] = max(d, default=0) * tick
        out["irq_ms"] = sum(a - b for a, b in zip(after.irq, before.irq)) * tick
    return out


def watched(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` and what the host did meanwhile: (its result, ``between``)."""
    before = sample()
    result = fn(*args, **kwargs)
    return result, between(before, sample())


def watched_run(run, *args, **kwargs):
    """``run(*args, **kwargs)`` for a runner that takes ``around_kernel``
    (``gpuwrite.paths.runner.run``), and what the host did meanwhile: (its result,
    ``between`` over the whole call, with ``kernel``: ``between`` over the sending kernel's
    span, or ``None`` where the runner never entered it)."""
    spans = []

    @contextlib.contextmanager
    def kernel_span():
        before = sample()
        try:
            yield
        finally:
            spans.append(between(before, sample()))

    result, host = watched(run, *args, around_kernel=kernel_span, **kwargs)
    host["kernel"] = spans[-1] if spans else None
    return result, host
