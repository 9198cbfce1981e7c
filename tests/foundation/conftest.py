import math
import os
from pathlib import Path

import pytest

from gpuwrite.cudaenv import SIMULATOR
from gpuwrite.host.verbs import Context

HERE = Path(__file__).resolve().parent
# A foundation test that names no time limit of its own gets this one. The slowest takes
# a few seconds alone on the CUDA simulator (2-core CI, several when the machine is
# shared); a device wait whose timeout never fires then fails the test in a minute
# rather than at pytest-timeout's global 900 s. On a GPU the first test of a worker to
# use a kernel also compiles it: send_messages takes 30 to 38 s of ptxas on an H100 host
# alone (BENCHMARKS.md, session 19), more with eight workers compiling at once.
DEFAULT_TIMEOUT_S = 60 if SIMULATOR else 180


def _timeout_scale() -> float:
    """GPUWRITE_TIMEOUT_SCALE (default 1): every foundation test's limit is multiplied by
    it. Under ThreadSanitizer the simulator's threads run several times slower
    (scripts/sanitize_check.sh sets it there)."""
    raw = os.environ.get("GPUWRITE_TIMEOUT_SCALE", "1")
    try:
        scale = float(raw)
    except ValueError:
        scale = 0.0
    if not (math.isfinite(scale) and scale >= 1):
        raise pytest.UsageError(f"GPUWRITE_TIMEOUT_SCALE={raw!r}: allowed a finite number >= 1")
    return scale


def pytest_collection_modifyitems(config, items):
    scale = _timeout_scale()
    for item in items:
        if HERE not in Path(item.path).resolve().parents:
            continue
        marker = item.get_closest_marker("timeout")
        if marker is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S * scale))
        elif scale != 1 and marker.args:
            item.add_marker(pytest.mark.timeout(marker.args[0] * scale))


@pytest.fixture
def nic():
    """A context with its engine stopped: tests drive it with ctx.poll()."""
    with Context() as ctx:
        yield ctx
