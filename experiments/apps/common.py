"""What both applications share: argument handling, timing, the bulk-store ceiling."""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from gpuwrite.cudaenv import SIMULATOR, cuda, world
from gpuwrite.device import api

# Exit status when the chosen world cannot run here (as `gpuwrite testbed` uses).
EXIT_UNAVAILABLE = 3
PATH_CHOICES = ("gpu_push", "gpu_push_inline", "nic_pull", "host_staged", "auto")


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
    return parser


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


def bulk_store_gbytes() -> tuple[float, str]:
    """The push ceiling, GB/s, and where it came from: measured now on a GPU (full-grid
    stores into mapped host memory, as ``gpuwrite bench`` does), or on the simulator
    the calibration file's measurement of the same thing."""
    if not SIMULATOR:
        from gpuwrite.bench.suite import bulk_store_gbytes as measure

        return measure(64 << 20), "measured in this run (full-grid stores to mapped host memory)"
    path = api.newest_calibration()
    if path:
        import tomllib

        with open(path, "rb") as f:
            data = tomllib.load(f)
        value = data.get("measurements", {}).get("bulk_store_to_host", {}).get("value")
        if value:
            return float(value), f"calibration file {path.rsplit('/', 1)[-1]} (another machine)"
    return float("nan"), "unknown: no GPU and no calibration file"


def skip(reason: str, as_json: bool) -> int:
    """Says why the chosen world cannot run here; the exit status to return."""
    print(json.dumps({"skipped": reason}) if as_json else f"skipped: {reason}")
    return EXIT_UNAVAILABLE


def default_repeats(repeats: int | None) -> int:
    return repeats or (1 if SIMULATOR else 3)


def header() -> str:
    return f"world: {world()}"


def median(values) -> float:
    return float(np.median(np.asarray(values, dtype=float)))
