"""What both applications share: argument handling, timing, the bulk-store ceiling."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from gpuwrite.cudaenv import SIMULATOR, cuda, world
from gpuwrite.device import api
from gpuwrite.host.verbs import MAX_WORKERS
from gpuwrite.paths.pull_agent import PULL_AGENTS

# Exit status when the chosen world cannot run here (as `gpuwrite testbed` uses).
EXIT_UNAVAILABLE = 3
PATH_CHOICES = ("gpu_push", "gpu_push_inline", "nic_pull", "host_staged", "auto")


def main_of(main, prog: str):
    """``main`` as the apps' ``__main__`` runs it: a Ctrl-C ends it with one line on
    stderr and exit 130, as the shell reports an interrupted command, no traceback. The
    sessions' context managers have stopped the emulated NIC's threads on the way out."""
    def run(argv=None) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt:
            print(f"{prog}: interrupted (Ctrl-C)", file=sys.stderr)
            return 130
    return run


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number is needed") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def paths_arg(text: str) -> tuple[str, ...]:
    names = tuple(p for p in text.split(",") if p)
    bad = [p for p in names if p not in PATH_CHOICES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"paths {text!r}: allowed a comma-separated list "
                                         f"of {', '.join(PATH_CHOICES)}")
    return names


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--world", choices=api.WORLDS, default="emulated",
                        help="emulated (software NIC; GPU or CUDA simulator) or testbed")
    parser.add_argument("--paths", type=paths_arg, default=PATH_CHOICES,
                        help="comma-separated paths to run (default: all, and auto)")
    parser.add_argument("--repeats", type=positive, default=None,
                        help="timed runs per path (default: 3 on a GPU, 1 on the simulator)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--pull-agent", choices=PULL_AGENTS, default=None,
                        help="what answers nic_pull's reads in emulated mode: gpu (a persistent "
                             "GPU block; the default on a GPU) or copy_engine (a driver call per "
                             "pull; the only one on the simulator)")
    parser.add_argument("--workers", type=positive, default=None,
                        help="the emulated NIC's engine threads (default: 1 on the simulator; "
                             "on a GPU a quarter of the CPUs, at most 4)")
    return parser


def parse_args(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """``parser.parse_args`` and the checks across options (exit 2 with the reason)."""
    args = parser.parse_args(argv)
    if args.pull_agent is not None and args.world != "emulated":
        parser.error(f"--pull-agent {args.pull_agent}: an option of --world emulated (a real "
                     "NIC reads GPU memory itself)")
    if args.workers is not None and args.world != "emulated":
        parser.error(f"--workers {args.workers}: an option of --world emulated (the software "
                     "NIC's threads)")
    if args.workers is not None and args.workers > MAX_WORKERS:
        parser.error(f"--workers {args.workers}: allowed 1 to {MAX_WORKERS}")
    if args.pull_agent == "gpu" and SIMULATOR:
        parser.error("--pull-agent gpu: the CUDA simulator runs one kernel at a time, so the "
                      "agent cannot run beside the kernels; allowed here: copy_engine")
    return args


def pull_agent_for(world_name: str, pull_agent: str | None) -> str | None:
    """The Session's ``pull_agent``: as asked, else the GPU agent on a GPU in emulated mode
    (a pull then crosses PCIe as a NIC's read does; the copy engine's driver call per pull
    costs more than the read it stands for). None where the world has no such option."""
    if world_name != "emulated":
        return None
    return pull_agent or ("copy_engine" if SIMULATOR else "gpu")


def default_workers() -> int:
    """The emulated NIC's engine threads when none are asked for: one on the simulator; on
    a GPU a quarter of the CPUs, at most 4. Each worker copies pushed data from staging to
    its destination at about 9 GB/s (one CPU thread, H100 host); with one worker, the
    all-to-all's gpu_push measured the engine (2.35 to 2.83 ms for 32 MiB), with four it
    took 1.29 to 1.44 ms, below nic_pull's 1.50 (BENCHMARKS.md, session 13)."""
    if SIMULATOR:
        return 1
    return max(1, min(4, (os.cpu_count() or 4) // 4))


def session_options(world_name: str, pull_agent: str | None, session_kwargs: dict | None,
                    workers: int | None = None) -> dict:
    """A run's Session keywords: the caller's, with the pull agent and the engine's
    workers chosen (emulated mode)."""
    kwargs = dict(session_kwargs or {})
    agent = pull_agent_for(world_name, pull_agent)
    if agent is not None:
        kwargs.setdefault("pull_agent", agent)
        kwargs.setdefault("workers", workers or default_workers())
    return kwargs


class Timer:
    """Wall time of kernel launches: CUDA events on a GPU; on the simulator, the
    process clock (a Python interpreter's time, not a GPU's: meaningless as a number)."""

    def __enter__(self):
        if SIMULATOR:
            self._t0 = time.perf_counter()
        else:
            self._start, self._end = cuda.event(), cuda.event()
            self._start.record()
        return self

    def __exit__(self, *exc):
        if SIMULATOR:
            self.seconds = time.perf_counter() - self._t0
        else:
            self._end.record()
            self._end.synchronize()
            self.seconds = cuda.event_elapsed_time(self._start, self._end) / 1e3


def sync(*streams) -> None:
    """Waits for the kernels launched on the legacy default stream and on ``streams``,
    not for the whole device: a persistent kernel (issue 14's nic_pull agent) may run
    beside them on a stream of its own until it is stopped."""
    if SIMULATOR:
        return
    cuda.default_stream().synchronize()
    for stream in streams:
        stream.synchronize()


def bulk_store_gbytes() -> tuple[float, str]:
    """The push ceiling, GB/s, and where it came from: measured now on a GPU (full-grid
    stores into mapped host memory, as ``gpuwrite bench`` does), or on the simulator
    the calibration file's measurement of the same thing."""
    if not SIMULATOR:
        from gpuwrite.bench.suite import bulk_store_gbytes as measure

        return measure(64 << 20), "measured in this run (full-grid stores to mapped host memory)"
    # The apps live in the checkout: its experiments/calibration/, also when gpuwrite is installed.
    path = api.newest_calibration(str(Path(__file__).resolve().parents[1] / "calibration"))
    if path:
        import tomllib

        with open(path, "rb") as f:
            data = tomllib.load(f)
        value = data.get("measurements", {}).get("bulk_store_to_host", {}).get("value")
        if value:
            return float(value), f"calibration file {path.rsplit('/', 1)[-1]} (another machine)"
    return float("nan"), "unknown: no GPU and no calibration file"


def in_rounds(paths, repeats: int, run) -> dict:
    """``run(path)`` for each of ``paths``: once to warm up on a GPU, then ``repeats`` times
    in rounds of every path in turn, so that a host's slow stretch lands on one run of each
    path, not on every run of one (taken path by path, session 21's all-to-all had auto,
    which sent every pair as gpu_push does, at 1.06 to 1.11 ms against gpu_push's 1.36 to
    1.63). Returns {path: (its warm-up runs, its timed runs)}, each a list of what ``run``
    returned."""
    warm = {path: ([] if SIMULATOR else [run(path)]) for path in paths}
    timed: dict = {path: [] for path in paths}
    for _ in range(repeats):
        for path in paths:
            timed[path].append(run(path))
    return {path: (warm[path], timed[path]) for path in paths}


def skip(reason: str, as_json: bool) -> int:
    """Says why the chosen world cannot run here; the exit status to return."""
    print(json.dumps({"skipped": reason}) if as_json else f"skipped: {reason}")
    return EXIT_UNAVAILABLE


def emit(run, as_json: bool, print_table) -> int:
    """Runs an application (``run()`` returns its table), prints it as JSON or through
    ``print_table``; the exit status: 0 if every byte checked out, 1 if not (or a testbed
    bring-up step failed: the message names it), 3 where the chosen world cannot run here."""
    from gpuwrite.backends.testbed.devx import TestbedError

    try:
        out = run()
    except api.TestbedNotReady as exc:
        return skip(exc.reason, as_json)
    except TestbedError as exc:
        print(json.dumps({"failed": str(exc)}) if as_json else f"failed: {exc}")
        return 1
    if as_json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print(out["world"])
        print_table(out)
        if "note" in out:
            print(out["note"])
    return 0 if out["all_verified"] else 1


def verdict(out: dict, simulator_note: str) -> dict:
    """Marks the table verified if every path's run was, and notes the simulator."""
    out["all_verified"] = all(v.get("verified", True) for v in out["paths"].values())
    if SIMULATOR:
        out["note"] = f"CUDA simulator: {simulator_note}"
    return out


def default_repeats(repeats: int | None) -> int:
    return repeats or (1 if SIMULATOR else 3)


def header(session: api.Session | None = None) -> str:
    """The world line: where kernels run, and what stands in for what (``Session.describe``:
    the software NIC and what answers nic_pull; in testbed mode the NIC's loopback for the
    network and the second host)."""
    if session is not None:
        return f"world: {session.describe()}; kernels: {world()}"
    return f"world: {world()}"


def median(values) -> float:
    return float(np.median(np.asarray(values, dtype=float)))
