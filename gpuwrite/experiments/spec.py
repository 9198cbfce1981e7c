"""Experiment files: one TOML file per figure, each a list of sweeps.

A file names the figure it feeds and the sweeps whose rows that figure draws::

    [figure]
    kind = "latency_vs_size"     # a function in gpuwrite.experiments.figures.FIGURES
    title = "Zero-load latency vs message size"
    caption = "What the figure shows (experiments/README.md repeats it)."

    [[sweep]]
    name = "model"               # unique in the file; a column of the result table
    backend = "model"            # model | emulated (testbed: not built yet)
    measure = "latency"          # model: latency | throughput | efficiency | simulate
    output = "summary"           # simulate: summary | timeseries; emulated: summary | latencies
    require = "any"              # any | gpu (gpu: skipped where only the CUDA simulator is)
    exclude = [{path = "gpu_push_inline", size_bytes = 4096}]   # points left out
    [sweep.fixed]                # one value per key, for every point
    "nic.policy" = "hold"
    [sweep.vary]                 # a list per key: the sweep is their cross product, in order
    path = ["nic_pull", "host_staged", "gpu_push"]
    size_bytes = {from = 64, to = 1048576, factor = 2}   # or {from, to, step}, or a list

Keys are dotted names (``nic.policy``); nested TOML tables are flattened to the same names.
Which keys a sweep takes depends on its backend and measure (``allowed_keys``). Every
point is resolved into a complete configuration (every model parameter, every runner
argument, and a fingerprint of the backend's source code); its SHA-256 over canonical JSON
(``config_hash``) keys the result cache.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, fields
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport (pyproject.toml)
    import tomli as tomllib

from gpuwrite import MAX_MESSAGE_BYTES
from gpuwrite.experiments.backends import SIMULATOR_DEVICE, message_count
from gpuwrite.experiments.inputs import calibration_table
from gpuwrite.model import checks, pcie
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import PATHS, Params, Workload

BACKENDS = ("model", "emulated")
MODEL_MEASURES = ("latency", "throughput", "efficiency", "simulate")
OUTPUTS = {("model", "simulate"): ("summary", "timeseries"), ("emulated", None): ("summary", "latencies")}
REQUIRES = ("any", "gpu")
SWEEP_NAME = re.compile(r"[\w.-]+")
SWEEP_KEYS = ("name", "backend", "measure", "output", "require", "exclude", "fixed", "vary")
FIGURE_KEYS = ("kind", "title", "caption")
# Bounds on a file's size: a range expands to at most this many values, and a sweep (the
# cross product of its vary lists) to at most this many points; both are checked before
# anything is built. The largest stored figure sweep has 1,536 points.
MAX_VARY_VALUES = 10_000
MAX_SWEEP_POINTS = 100_000
# Resolved configurations change meaning when this does (bump it with the layout).
CONFIG_SCHEMA = 1
# The code whose results a point's configuration stands for: a change to any of these
# files changes every hash of that backend, so stored results are never reused stale.
# Each backend's list is the gpuwrite modules a point runs (what importing
# experiments/backends.py and what it calls loads; a test checks the list against the
# imports): the emulated backend runs the runner, its kernels and verbs, the host side and
# cudaenv, not the put API (device/api.py), which no emulated sweep runs. The emulated
# backend's C engine counts through the digest its compiled extension carries
# (csrc/ffi_build.py embeds the SHA-256 of csrc/*.c and *.h): an installed package has no
# csrc/ to read, and a checkout whose extension was not rebuilt runs the old engine.
CODE_ROOT = Path(__file__).resolve().parents[2]     # where the patterns below are matched
_POINT = ("gpuwrite/__init__.py", "gpuwrite/experiments/backends.py")
BACKEND_CODE = {
    "model": (*_POINT, "gpuwrite/model/*.py"),
    "emulated": (*_POINT, "gpuwrite/cudaenv.py", "gpuwrite/kernel_cache.py", "gpuwrite/layouts.py",
                 "gpuwrite/paths/*.py", "gpuwrite/device/__init__.py", "gpuwrite/device/copy.py",
                 "gpuwrite/device/intrinsics.py", "gpuwrite/device/verbs.py", "gpuwrite/host/*.py"),
}
BACKEND_ENGINE = {"emulated": True}

# Emulated runs: arguments of gpuwrite.paths.runner.run and how many messages to send.
# messages: at least this many; total_bytes: enough messages to move this many bytes
# (capped at max_messages); simulator_messages: the count on the CUDA simulator, whose
# timings mean nothing, so it only checks that every byte arrives. repeat: which run of
# an otherwise identical point this is (vary it as the file's first key, e.g. repeat =
# [0, 1, 2], and every point is measured once before any is measured again, so that a
# host's slow minute lands on one run of many points, not on every run of one point; the
# figures draw the median and the min to max of the runs).
EMULATED_DEFAULTS = {
    "path": "gpu_push", "size_bytes": 64, "messages": 100, "total_bytes": 0, "max_messages": 200_000,
    "simulator_messages": 2, "warmup": 0, "n_qps": 1, "batch": 1, "policy": "hold", "wait_each": False,
    "block_threads": 0, "chunk_bytes": 65536, "stage_slot_bytes": 256, "workers": 1, "seed": 7,
    "repeat": 0,
}


class SpecError(ValueError):
    """An experiment file is wrong: the message names the file, the key, the value and what is allowed.

    ``value`` and ``allowed`` (when given) go into the CLI's JSON error as they are;
    otherwise the CLI reads them back from a message of the form ``KEY=VALUE is not
    allowed; allowed: WHAT``."""

    def __init__(self, message: str, *, value=None, allowed: str | None = None):
        super().__init__(message)
        self.value = value
        self.allowed = allowed


def _params_keys() -> tuple[str, ...]:
    keys = []
    for f in fields(Params):
        if f.name in Params._SECTIONS:
            keys += [f"{f.name}.{g.name}" for g in fields(Params._SECTIONS[f.name]) if not g.name.startswith("_")]
        elif not f.name.startswith("_"):
            keys.append(f.name)
    return tuple(keys)


PARAMS_KEYS = _params_keys()
WORKLOAD_KEYS = tuple(f"workload.{f.name}" for f in fields(Workload))
LINK_KEYS = tuple(f"link.{f.name}" for f in fields(pcie.LinkConfig))


def allowed_keys(backend: str, measure: str | None) -> tuple[str, ...]:
    """The keys ``fixed`` and ``vary`` accept for this backend and measure."""
    if backend == "emulated":
        return tuple(EMULATED_DEFAULTS)
    if measure == "efficiency":
        return ("operation", "size_bytes", "start_address", *LINK_KEYS)
    if measure == "simulate":
        return (*PARAMS_KEYS, *WORKLOAD_KEYS, "seed", "samples", "calibration")
    return (*PARAMS_KEYS, "size_bytes", "calibration")


@dataclass(frozen=True)
class Sweep:
    """One sweep of a file: a backend, what it measures, fixed values and varied lists."""

    name: str
    backend: str
    measure: str | None
    output: str
    require: str
    fixed: dict
    vary: dict
    exclude: tuple = ()
    base_dir: Path = Path(".")
    file: Path | None = None    # the experiment file it came from, named in its errors

    def points(self, device: str | None = None) -> list[dict]:
        """Every point of the cross product (fixed values merged in), in file order, minus
        exclusions. On the CUDA simulator (``device`` ``"cudasim"``) an emulated sweep runs
        only the first of its repeats: its runs check bytes, not time, and a repeat would
        check the same bytes again."""
        names = list(self.vary)
        out = []
        for combo in itertools.product(*(self.vary[name] for name in names)):
            values = {**self.fixed, **dict(zip(names, combo))}
            if any(all(values.get(k) == v for k, v in rule.items()) for rule in self.exclude):
                continue
            if device == SIMULATOR_DEVICE and self.backend == "emulated" and values.get("repeat", 0):
                continue
            out.append(values)
        return out

    @property
    def columns(self) -> list[str]:
        """Configuration columns of the result table: the keys this sweep names."""
        return [*self.fixed, *(k for k in self.vary if k not in self.fixed)]


@dataclass(frozen=True)
class ExperimentSpec:
    """A whole experiment file: the figure it feeds (if any) and its sweeps."""

    path: Path
    sweeps: tuple[Sweep, ...]
    figure_kind: str | None = None
    title: str = ""
    caption: str = ""

    @property
    def name(self) -> str:
        """The file's stem: names the result table and the figure files."""
        return self.path.stem

    def sweep(self, name: str) -> Sweep:
        for sweep in self.sweeps:
            if sweep.name == name:
                return sweep
        raise SpecError(f"{self.path}: sweep {name!r} is not allowed; allowed: "
                        + ", ".join(s.name for s in self.sweeps))


# --- loading -----------------------------------------------------------------------

def _flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and not _is_range(value):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _is_range(value) -> bool:
    return isinstance(value, dict) and "from" in value and "to" in value


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def range_count(where: str, value: dict) -> int:
    """How many values {from, to, step} or {from, to, factor} expands to, computed without
    building them; every error names the key at fault."""
    extra = set(value) - {"from", "to", "step", "factor"}
    if extra or ("step" in value) == ("factor" in value):
        raise SpecError(f"{where}={value!r} is not allowed; allowed: keys from, to and exactly one of step, factor")
    start, stop = value["from"], value["to"]
    for key in ("from", "to"):
        if not _number(value[key]):
            raise SpecError(f"{where}.{key}={value[key]!r} is not allowed; allowed: a finite number")
    if start > stop:
        raise SpecError(f"{where}.from={start!r} is not allowed with to={stop!r}; allowed: from <= to")
    if "step" in value:
        step = value["step"]
        if not _number(step) or step <= 0:
            raise SpecError(f"{where}.step={step!r} is not allowed; allowed: a number > 0")
        return _whole_count((stop - start) / step + 1e-9)
    factor = value["factor"]
    if start <= 0:
        raise SpecError(f"{where}.from={start!r} is not allowed with factor; allowed: a number > 0 "
                        "(a geometric range starts above zero)")
    if not _number(factor) or factor <= 1:
        raise SpecError(f"{where}.factor={factor!r} is not allowed; allowed: a number > 1")
    return _whole_count(math.log(stop / start, factor) + 1e-9)


def _whole_count(steps: float) -> int | float:
    """Values in a range of ``steps`` steps: floor + 1, or infinity where the division or
    the logarithm overflowed (a step of 1e-300 from 1 to 1e300: int() of it raised)."""
    return math.floor(steps) + 1 if math.isfinite(steps) else math.inf


def expand_range(where: str, value) -> list:
    """A vary entry: a non-empty list, or {from, to, step} (linear) or {from, to, factor} (geometric),
    of at most ``MAX_VARY_VALUES`` values."""
    if isinstance(value, list):
        if not value:
            raise SpecError(f"{where}=[] is not allowed; allowed: a non-empty list")
        return value
    if not _is_range(value):
        raise SpecError(f"{where}={value!r} is not allowed; allowed: a non-empty list, "
                        "{from, to, step} or {from, to, factor}")
    count = range_count(where, value)
    if count > MAX_VARY_VALUES:
        # an integer of hundreds of digits (a step of 1e-300) is shown as what it is about
        many = (f"{count:,} values" if count < 10**15 else f"about {float(count):.3g} values") \
            if count < math.inf else "more values than a float counts"
        raise SpecError(f"{where}={value!r} is not allowed ({many}); allowed: at most "
                        f"{MAX_VARY_VALUES:,} values (a wider step or factor)")
    start, stop = value["from"], value["to"]
    step, factor = value.get("step"), value.get("factor")
    out, current = [], start
    # counted, not accumulated until past ``to``: a step or factor too small to move a
    # float (1e16 + 0.5, 5e-324 x 1.1) never got there, and the file never finished loading
    for _ in range(count):
        if current > stop:
            break
        out.append(current)
        current = current + step if step is not None else current * factor
    return out


def _check_keys(where: str, given, allowed) -> None:
    for key in given:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"{where}: key {key!r} is not allowed{hint}; allowed: {', '.join(allowed)}")


def _choice(where: str, value, allowed) -> None:
    if value not in allowed:
        raise SpecError(f"{where}={value!r} is not allowed; allowed: {', '.join(map(str, allowed))}")


def _load_sweep(file: Path, index: int, data: dict) -> Sweep:
    if not isinstance(data, dict):
        raise SpecError(f"{file}: sweep {index + 1} is not allowed as {data!r}; allowed: a [[sweep]] table")
    name = data.get("name", f"sweep{index + 1}")
    if not isinstance(name, str) or not SWEEP_NAME.fullmatch(name):
        # the name is part of the cache's file names: a "/" in it failed there, with a traceback
        raise SpecError(f"{file}: sweep {index + 1}: name={name!r} is not allowed; allowed: a non-empty text of "
                        "letters, digits, _, - and .")
    where = f"{file}: sweep {name!r}"
    _check_keys(where, data, SWEEP_KEYS)
    backend = data.get("backend")
    if backend == "testbed":
        raise SpecError(f"{where}: backend='testbed' is not allowed yet; allowed: model, emulated "
                        "(the testbed backend, a real mlx5 NIC through pyverbs, is not built)")
    _choice(f"{where}: backend", backend, BACKENDS)
    measure = data.get("measure")
    if backend == "model":
        _choice(f"{where}: measure", measure, MODEL_MEASURES)
    elif measure is not None:
        raise SpecError(f"{where}: measure={measure!r} is not allowed; allowed: no measure on the emulated backend")
    outputs = OUTPUTS.get((backend, measure if backend == "model" else None), ("summary",))
    output = data.get("output", outputs[0])
    _choice(f"{where}: output", output, outputs)
    require = data.get("require", "any")
    _choice(f"{where}: require", require, REQUIRES if backend == "emulated" else ("any",))
    allowed = allowed_keys(backend, measure)
    for table in ("fixed", "vary"):
        if not isinstance(data.get(table, {}), dict):
            # _flatten of a number or a text failed with a traceback
            raise SpecError(f"{where}: {table}={data[table]!r} is not allowed; allowed: a [sweep.{table}] "
                            "table of key = value")
    fixed = _flatten(data.get("fixed", {}))
    vary_raw = _flatten(data.get("vary", {}))
    _check_keys(f"{where}: fixed", fixed, allowed)
    _check_keys(f"{where}: vary", vary_raw, allowed)
    if "calibration" in vary_raw:
        raise SpecError(f"{where}: vary key 'calibration' is not allowed; allowed: calibration under fixed")
    vary = {key: expand_range(f"{where}: vary.{key}", value) for key, value in vary_raw.items()}
    for key, values in vary.items():
        # each point once: a value twice made the same point twice, and two identical rows
        # in the table (a run again is ``repeat``)
        if key in fixed:
            raise SpecError(f"{where}: key {key!r} is not allowed in both fixed and vary; allowed: one of them "
                            "(vary's values replaced the fixed one)")
        for position, value in enumerate(values):
            if value in values[:position]:
                raise SpecError(f"{where}: vary.{key} value {value!r} is not allowed twice; allowed: distinct "
                                "values (repeat = [0, 1, ...] measures a point again)")
    points = math.prod(len(values) for values in vary.values())
    if points > MAX_SWEEP_POINTS:
        raise SpecError(f"{where}: vary={{{', '.join(f'{k}: {len(v)} values' for k, v in vary.items())}}} is not "
                        f"allowed ({points:,} points); allowed: at most {MAX_SWEEP_POINTS:,} points per sweep")
    exclude = data.get("exclude", [])
    if not isinstance(exclude, list) or not all(isinstance(rule, dict) for rule in exclude):
        raise SpecError(f"{where}: exclude={exclude!r} is not allowed; allowed: a list of tables of key = value")
    for rule in exclude:
        _check_keys(f"{where}: exclude", rule, allowed)
        for key in rule:
            # a point is matched on the values the file gives it, not on defaults: a rule on
            # a key neither fixed nor varied matched no point, and excluded nothing, silently
            if key not in fixed and key not in vary:
                raise SpecError(f"{where}: exclude={rule!r} is not allowed (key {key!r} is neither fixed nor "
                                "varied, so the rule matches no point); allowed: rules on the keys of fixed and "
                                f"vary: {', '.join([*fixed, *vary]) or 'none'}")
    sweep = Sweep(name, backend, measure, output, require, fixed, vary, tuple(exclude), file.parent, file)
    if exclude and not sweep.points():
        raise SpecError(f"{where}: exclude={exclude!r} is not allowed (it leaves no point); allowed: rules that "
                        "leave at least one point")
    return sweep


def load_spec(path: str | Path) -> ExperimentSpec:
    """Reads and checks an experiment file; every point is resolved once so errors show now."""
    file = Path(path)
    if not file.is_file():
        raise SpecError(f"experiment file {str(path)!r} is not allowed; allowed: an existing TOML file")
    try:
        data = tomllib.loads(file.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SpecError(f"experiment file {str(path)!r} is not allowed (byte {exc.start} is not UTF-8); "
                        "allowed: a TOML file of UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"experiment file {str(path)!r} is not allowed (not valid TOML: {exc}); allowed: a "
                        "valid TOML file", value=str(path), allowed="a valid TOML file") from None
    except OSError as exc:   # an error without a file name (EIO of /proc/self/mem): name it here
        raise SpecError(f"experiment file {str(path)!r} is not allowed (reading it failed: "
                        f"{exc.strerror or type(exc).__name__}); allowed: a readable TOML file") from None
    _check_keys(str(file), data, ("figure", "sweep"))
    figure = data.get("figure", {})
    if not isinstance(figure, dict):
        raise SpecError(f"{file}: figure={figure!r} is not allowed; allowed: a [figure] table")
    _check_keys(f"{file}: figure", figure, FIGURE_KEYS)
    for key in ("title", "caption"):
        if not isinstance(figure.get(key, ""), str):
            raise SpecError(f"{file}: figure.{key}={figure[key]!r} is not allowed; allowed: a text "
                            f"({key} = \"...\")")
    raw_sweeps = data.get("sweep", [])
    if not isinstance(raw_sweeps, list) or not raw_sweeps:
        raise SpecError(f"{file}: sweep={raw_sweeps!r} is not allowed; allowed: one or more [[sweep]] tables")
    sweeps = tuple(_load_sweep(file, i, s) for i, s in enumerate(raw_sweeps))
    names = [s.name for s in sweeps]
    for name in names:
        if names.count(name) > 1:
            raise SpecError(f"{file}: sweep name {name!r} is not allowed twice; allowed: unique names")
    kind = figure.get("kind")
    if kind is not None:
        from gpuwrite.experiments.figures import FIGURES
        _choice(f"{file}: figure.kind", kind, tuple(FIGURES))
    spec = ExperimentSpec(file, sweeps, kind, figure.get("title", ""), figure.get("caption", ""))
    for sweep in sweeps:
        for values in sweep.points():
            resolve(sweep, values, device="check")
    return spec


# --- resolving a point into a complete configuration -------------------------------

def _nest(values: dict) -> dict:
    """{"nic.policy": "drop"} -> {"nic": {"policy": "drop"}}."""
    out: dict = {}
    for key, value in values.items():
        parts = key.split(".")
        table = out
        for part in parts[:-1]:
            table = table.setdefault(part, {})
        table[parts[-1]] = value
    return out


def _point_error(sweep: Sweep, values: dict, exc: Exception) -> SpecError:
    varied = {k: values[k] for k in sweep.vary}
    where = f"{sweep.file}: " if sweep.file is not None else ""
    return SpecError(f"{where}sweep {sweep.name!r}, point {varied}: {exc}")


def resolve(sweep: Sweep, values: dict, device: str) -> dict:
    """The complete configuration of one point: what runs, with every default filled in.

    ``device`` (the GPU's name, or ``cudasim``) is part of an emulated point's
    configuration: the same run on another device is another measurement.
    """
    config: dict = {"schema": CONFIG_SCHEMA, "backend": sweep.backend, "measure": sweep.measure,
                    "output": sweep.output, "code": code_fingerprint(sweep.backend)}
    try:
        checks.check_finite(values)
        if sweep.backend == "emulated":
            run = {**EMULATED_DEFAULTS, **values}
            _check_emulated(run)
            config.update(run=run, device=device)
        elif sweep.measure == "efficiency":
            link = pcie.LinkConfig(**_nest(values).get("link", {}))
            size = values.get("size_bytes", 512)
            _check_size(size, 0)
            start = values.get("start_address", 0)
            operation = values.get("operation", "read")
            pcie.wire_bytes(link, operation, size, start)
            config.update(link=link.to_dict(), operation=operation, size_bytes=size, start_address=start)
        else:
            params = Params()
            if "calibration" in values:
                if not isinstance(values["calibration"], str):
                    raise ParamError("calibration", values["calibration"], "a TOML file's path (text)")
                calibration = Path(values["calibration"])
                if not calibration.is_absolute():
                    calibration = sweep.base_dir / calibration
                # the checks `model --calibration` makes (a simulator's file, one that sets
                # nothing); Params.with_calibration made none of them
                params = params.updated(calibration_table(calibration, "calibration"))
            overrides = _nest({k: v for k, v in values.items() if k in PARAMS_KEYS})
            params = params.updated(overrides) if overrides else params
            config["params"] = params.to_dict()
            if sweep.measure == "simulate":
                workload = {k[len("workload."):]: v for k, v in values.items() if k.startswith("workload.")}
                checks.check_samples(values.get("samples", 1000))
                workload = Workload.from_dict(workload)
                seed = values.get("seed", 0)
                checks.check_seed(seed)
                config.update(workload=workload.to_dict(), seed=seed, samples=values.get("samples", 1000))
            else:
                size = values.get("size_bytes", 4096)
                _check_size(size, 0)
                config["size_bytes"] = size
    except (ParamError, TypeError) as exc:
        raise _point_error(sweep, values, exc) from None
    return config


def _check_size(size, minimum: int) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or not minimum <= size <= MAX_MESSAGE_BYTES:
        raise ParamError("size_bytes", size, f"an integer >= {minimum} and <= {MAX_MESSAGE_BYTES:,} "
                         "(gpuwrite.MAX_MESSAGE_BYTES)")


# The QPs an emulated run can open: the default max_qps of gpuwrite.host.verbs.Context,
# which the runner opens (a test holds them equal).
EMULATED_MAX_QPS = 4096
# An emulated run holds its payload three times (the GPU source, the destination region
# and the host copy it checks against): its messages x size stays within this, on a GPU
# as on the simulator, so that a file valid on one is valid on the other.
EMULATED_MAX_PAYLOAD_BYTES = 1 << 30


def _check_emulated(run: dict) -> None:
    if run["path"] not in PATHS:
        raise ParamError("path", run["path"], ", ".join(PATHS))
    _check_size(run["size_bytes"], 1)
    for key in ("messages", "simulator_messages", "n_qps", "batch", "max_messages", "workers"):
        value = run[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ParamError(key, value, "an integer >= 1")
    for key in ("total_bytes", "warmup", "block_threads", "repeat"):
        value = run[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ParamError(key, value, "an integer >= 0")
    if run["n_qps"] > EMULATED_MAX_QPS:
        raise ParamError("n_qps", run["n_qps"], f"an integer from 1 to {EMULATED_MAX_QPS} (the emulated "
                         "NIC's queue table)")
    count = message_count(run, simulator=False)
    if count * run["size_bytes"] > EMULATED_MAX_PAYLOAD_BYTES:
        raise ParamError("size_bytes", run["size_bytes"],
                         f"messages x size_bytes <= {EMULATED_MAX_PAYLOAD_BYTES:,} B (here {count:,} "
                         "messages on a GPU: lower messages, total_bytes or max_messages)")
    if run["policy"] not in ("hold", "drop"):
        raise ParamError("policy", run["policy"], "hold, drop")
    # the runner checks chunk_bytes's range, not its type; it divides by stage_slot_bytes
    # before gpuwrite.host.verbs checks it (a power of two, 64 B to 1 MiB)
    if isinstance(run["chunk_bytes"], bool) or not isinstance(run["chunk_bytes"], int):
        raise ParamError("chunk_bytes", run["chunk_bytes"], "an integer (a multiple of 4, at least 64)")
    checks.check_seed(run["seed"])
    slot = run["stage_slot_bytes"]
    if isinstance(slot, bool) or not isinstance(slot, int) or not 64 <= slot <= 1 << 20 or slot & (slot - 1):
        raise ParamError("stage_slot_bytes", slot, "a power of two from 64 to 1,048,576")
    if not isinstance(run["wait_each"], bool):
        raise ParamError("wait_each", run["wait_each"], "true, false")


def fingerprint_files(root: Path, patterns) -> str:
    """SHA-256 over the names and code of the files matching ``patterns`` under ``root``:
    a Python file by what it executes (``executable_source``), any other by its bytes."""
    digest = hashlib.sha256()
    for file in sorted(f for pattern in patterns for f in root.glob(pattern)):
        body = executable_source(file.read_bytes()) if file.suffix == ".py" else file.read_bytes()
        digest.update(file.relative_to(root).as_posix().encode() + b"\0" + body + b"\0")
    return digest.hexdigest()


def executable_source(source: bytes) -> bytes:
    """A Python file as it executes: its syntax tree without comments, docstrings or
    layout. Stored results name the code that made them, and a corrected comment or
    docstring makes no other number: with the file's bytes fingerprinted, every such
    edit marked the GPU tables as made by other code until a GPU measured them again.
    A file that does not parse counts by its bytes.

    The tree is written out here, not by ``ast.dump``, whose text changes between Python
    versions (3.12 added fields that it prints even when empty, 3.13 stopped printing
    empty ones): empty fields are left out, so the GPU machines' Python and CI's agree."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or ([] if isinstance(node, ast.Module) else [ast.Pass()])

    def dump(value) -> str:
        if isinstance(value, ast.AST):
            fields = (f"{name}={dump(getattr(value, name))}" for name in value._fields
                      if getattr(value, name, None) not in (None, []))
            return f"{type(value).__name__}({','.join(fields)})"
        if isinstance(value, list):
            return f"[{','.join(dump(v) for v in value)}]"
        return repr(value)

    return dump(tree).encode()


def engine_fingerprint() -> str:
    """SHA-256 of the C sources the NIC engine extension was compiled from."""
    try:
        from gpuwrite._gw_cffi import ffi, lib
        return ffi.string(lib.gw_csrc_sha256()).decode()
    except (ImportError, AttributeError) as exc:   # AttributeError: built before the digest existed
        raise SpecError("the emulated backend needs the C engine built from this source (python3 "
                        f"csrc/ffi_build.py in a checkout, or pip install): {exc}") from None


@functools.lru_cache(maxsize=None)
def code_fingerprint(backend: str) -> str:
    """Fingerprint of the source code behind ``backend``: the same in this checkout and in
    the installed package (Python sources by their package paths; the C engine by the
    digest compiled into it)."""
    python = fingerprint_files(CODE_ROOT, BACKEND_CODE[backend])
    if not BACKEND_ENGINE.get(backend):
        return python
    return hashlib.sha256(f"{python}\0csrc\0{engine_fingerprint()}".encode()).hexdigest()


def config_hash(config: dict) -> str:
    """SHA-256 of the canonical JSON of a resolved configuration (sorted keys, no spaces)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_jsonable)
    return hashlib.sha256(text.encode()).hexdigest()


def _jsonable(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, (tuple, set)):
        return list(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot hash a {type(value).__name__}")


def find_specs(directory: str | Path) -> list[Path]:
    """The experiment files of a directory (its top level), sorted by name."""
    folder = Path(directory)
    if not folder.is_dir():
        raise SpecError(f"experiments directory {str(directory)!r} is not allowed; allowed: an existing directory")
    return sorted(folder.glob("*.toml"))

