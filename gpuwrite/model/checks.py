"""Checks of model inputs that the dataclasses' field checks leave out: a TOML file that is
not UTF-8 text, numbers that are not finite (TOML writes ``nan`` and ``inf``), a topology
that is not text, weights that are not lists of numbers, and upper bounds on a simulated
workload (past them numpy cannot allocate the simulator's arrays, or a run never ends).

``Params.from_dict`` and ``Workload.from_dict`` apply them, so a library caller gets them
too; ``gpuwrite sim`` and ``gpuwrite model`` read their files with ``read_toml`` and name the
option or file in front of the model's errors, and experiment files (``spec.resolve``) check
a point's values whole first (the emulated ones reach no model class). Every error is a
``ParamError`` naming the value and what is allowed.
"""
from __future__ import annotations

import math
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport (pyproject.toml)
    import tomli as tomllib

from gpuwrite import MAX_MESSAGE_BYTES
from gpuwrite.model.errors import ParamError

# The simulator keeps about 300 bytes per message (1.3 GB for 4 M messages, measured).
MAX_MESSAGES = 10_000_000
MAX_QPS = 1 << 24           # an InfiniBand QP number has 24 bits
# n_qps x outstanding: the simulator's issue heap holds an entry for every message that
# may be in flight at once, allocated up front.
MAX_IN_FLIGHT = 1 << 24
MAX_SAMPLES = 1_000_000     # points of a time series
MAX_PACKETS = 50_000_000    # packets of one simulation: about 60 bytes each in its tables
_WORKLOAD_LISTS = ("sizes_bytes", "weights", "qp_weights")
_WORKLOAD_SIZES = ("size_bytes", "min_bytes", "max_bytes")


def read_toml(path, name: str) -> dict:
    """The table of a TOML file the user named (``name``: ``--config``, ``CONFIG``...), or
    a ParamError: not an existing file, not UTF-8 text, or not valid TOML."""
    text = str(path)
    file = Path(path)
    if not text.strip() or not file.is_file():
        raise ParamError(name, text, "an existing TOML file")
    try:
        data = tomllib.loads(file.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ParamError(name, text, f"a TOML file of UTF-8 text (byte {exc.start} is not UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ParamError(name, text, f"a valid TOML file ({exc})") from None
    except OSError as exc:   # no file name in it (EIO of /proc/self/mem): a traceback before
        raise ParamError(name, text, f"a readable TOML file (reading it failed: "
                                     f"{exc.strerror or type(exc).__name__})") from None
    return data


def check_finite(data, where: str = "") -> None:
    """A ParamError naming the first NaN or infinity in ``data`` (tables and lists, to any
    depth) by its dotted key."""
    if isinstance(data, dict):
        for key, value in data.items():
            check_finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, (list, tuple)):
        for index, value in enumerate(data):
            check_finite(value, f"{where}[{index}]")
    elif isinstance(data, float) and not math.isfinite(data):
        raise ParamError(where or "value", data, "a finite number")


def check_params(data) -> None:
    """A parameter table (``Params.to_dict``'s shape: a ``--config`` file, a sim config's
    ``[params]``): finite numbers and a topology given as text; the rest is Params's to say."""
    if not isinstance(data, dict):
        return      # Params.from_dict: "a table of keys"
    check_finite(data)
    topology = data.get("topology")
    if topology is not None and not isinstance(topology, str):
        from gpuwrite.model.topology import PRESETS
        raise ParamError("topology", topology, ", ".join((*PRESETS, "sysfs:<directory>")))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _at_most(name: str, value, most: int, why: str = "") -> None:
    if _is_int(value) and value > most:
        raise ParamError(name, value, f"an integer <= {most:,}{why}")


def check_workload(data) -> None:
    """A ``[workload]`` table: finite numbers, lists where lists go, and the upper bounds
    the simulator needs; lower bounds and choices are Workload's to say."""
    if not isinstance(data, dict):
        return      # Workload.from_dict: "a table of keys"
    check_finite(data, "workload")
    for name in _WORKLOAD_LISTS:
        value = data.get(name, [])
        if not isinstance(value, (list, tuple)) or not all(
                isinstance(item, (int, float)) and not isinstance(item, bool) for item in value):
            raise ParamError(f"workload.{name}", value, "a list of numbers")
    _at_most("workload.n_messages", data.get("n_messages"), MAX_MESSAGES,
             " (the simulator keeps about 300 bytes per message)")
    _at_most("workload.n_qps", data.get("n_qps"), MAX_QPS, " (a QP number has 24 bits)")
    _at_most("workload.samples", data.get("samples"), MAX_SAMPLES)
    for name in _WORKLOAD_SIZES:
        _at_most(f"workload.{name}", data.get(name), MAX_MESSAGE_BYTES, " (gpuwrite.MAX_MESSAGE_BYTES)")
    for size in data.get("sizes_bytes", []):
        if _is_int(size) and size > MAX_MESSAGE_BYTES:
            raise ParamError("workload.sizes_bytes", data["sizes_bytes"],
                             f"integers <= {MAX_MESSAGE_BYTES:,} (gpuwrite.MAX_MESSAGE_BYTES)")
    from gpuwrite.model.params import Workload
    n_qps, outstanding = data.get("n_qps", Workload.n_qps), data.get("outstanding", Workload.outstanding)
    if _is_int(n_qps) and _is_int(outstanding) and n_qps >= 1 and n_qps * outstanding > MAX_IN_FLIGHT:
        raise ParamError("workload.outstanding", outstanding,
                         f"an integer <= {max(1, MAX_IN_FLIGHT // n_qps):,} with workload.n_qps={n_qps:,} "
                         f"(n_qps x outstanding <= {MAX_IN_FLIGHT:,}: the simulator's issue heap)")


# The longest time the model takes as one parameter (a poll interval, a stall): the
# simulator counts int64 picoseconds below 2**62 (sim.LATEST_NS, about 53 days), so a
# longer one can be neither simulated nor checked by simulation (``buffer --check``);
# ``buffer.need`` answered for a poll interval of 1e30 ns with a 4.7e31-byte buffer.
MAX_TIME_NS = (1 << 62) / 1000
TIME_NS_ALLOWED = f"a number of ns from 0 to {MAX_TIME_NS:.4g} (2**62 ps, the simulator's clock)"


def check_time_ns(name: str, value) -> None:
    """A time in ns: a finite number from 0 to MAX_TIME_NS (NaN fails both comparisons)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_TIME_NS:
        raise ParamError(name, value, TIME_NS_ALLOWED)


# Seeds are written into TOML files and result tables, whose integers are 64-bit signed.
MAX_SEED = 2**63 - 1


def check_seed(value, name: str = "seed") -> None:
    """A random seed: an integer from 0 to MAX_SEED (what TOML and parquet can hold)."""
    if not _is_int(value) or not 0 <= value <= MAX_SEED:
        raise ParamError(name, value, f"an integer from 0 to {MAX_SEED:,} (2**63 - 1)")


def check_samples(value) -> None:
    """The ``samples`` of an experiment file's simulate sweep: points of its time series."""
    if not _is_int(value) or not 1 <= value <= MAX_SAMPLES:
        raise ParamError("samples", value, f"an integer from 1 to {MAX_SAMPLES:,}")


def check_start_address(start, size: int, address_bits: int) -> None:
    """A PCIe transfer's start address: the transfer ends within the address space (a
    transfer longer than the address space is the size's fault, not the address's)."""
    if _is_int(size) and size > 1 << address_bits:
        raise ParamError("size_bytes", size, f"an integer from 0 to {1 << address_bits:,} "
                         f"(a transfer within {address_bits}-bit addresses)")
    if _is_int(start) and _is_int(size) and start >= 0 and start + size > 1 << address_bits:
        raise ParamError("start_address", start, f"an integer from 0 to {(1 << address_bits) - size:,} "
                         f"(a {size:,}-byte transfer within {address_bits}-bit addresses)")
