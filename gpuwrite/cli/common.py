"""Helpers shared by the commands: sizes and bounds, JSON output, rich tables, progress,
provenance and result files."""
from __future__ import annotations

import datetime
import json
import math
import os
import re
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpuwrite import MAX_MESSAGE_BYTES
from gpuwrite.cli import NoGPUError, UsageError

console = Console(stderr=False)

_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
               "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
SIZE_SYNTAX = "a whole number of bytes, optionally with K/KiB, M/MiB or G/GiB (powers of 1024: 4096, 4K, 1MiB)"
RESULT_SUFFIXES = (".parquet", ".csv")


def add_json_flag(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON (errors too)")


def parse_size(text, name: str = "size", *, minimum: int = 1, maximum: int = MAX_MESSAGE_BYTES) -> int:
    """'4096', '4K', '64KiB', '1MiB', '1G' -> bytes, within [minimum, maximum].

    ``name`` is what the error names (``--size``); the one size syntax of every command.
    """
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _SIZE_UNITS:
        raise UsageError(f"{name}={str(text)!r} is not allowed; allowed: {SIZE_SYNTAX}", value=str(text),
                         allowed=SIZE_SYNTAX)
    size = int(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]
    check_range(name, size, minimum, maximum, text=str(text))
    return size


def parse_sizes(text: str, name: str = "sizes", **bounds) -> list[int]:
    """A comma-separated list of sizes (at least one), each as ``parse_size`` reads it."""
    items = [item for item in str(text).split(",") if item.strip()]
    if not items:
        raise UsageError(f"{name}={str(text)!r} is not allowed; allowed: one or more comma-separated "
                         f"sizes, each {SIZE_SYNTAX}", value=str(text), allowed="one or more sizes")
    if len(items) == 1:
        return [parse_size(items[0], name, **bounds)]
    sizes = []
    for item in items:
        try:
            sizes.append(parse_size(item, name, **bounds))
        except UsageError as exc:
            raise UsageError(f"{name}={str(text)!r} is not allowed (at {item.strip()!r}); allowed: sizes, "
                             f"each {exc.allowed}", value=str(text), allowed=exc.allowed) from None
    return sizes


def check_range(name: str, value: int, minimum: int | None = None, maximum: int | None = None,
                text: str | None = None) -> int:
    """``value`` unchanged, or a UsageError naming ``name``, the value and the bounds."""
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if maximum is None:
            allowed = f"an integer >= {minimum:,}"
        elif minimum is None:
            allowed = f"an integer <= {maximum:,}"
        else:
            allowed = f"{minimum:,} to {maximum:,}"
        shown = text if text is not None and text != str(value) else None
        raise UsageError(f"{name}={text if shown else value} is not allowed"
                         f"{f' ({value:,} bytes)' if shown else ''}; allowed: {allowed}",
                         value=value, allowed=allowed)
    return value


def check_number(name: str, value: float, minimum: float, maximum: float, allowed: str) -> float:
    """``value`` unchanged when finite and within [minimum, maximum], else a UsageError
    naming ``name`` and the value, with ``allowed`` (what the bounds mean) as the rule:
    for a float option, which argparse takes as ``1e30``, ``inf`` or ``nan`` alike."""
    if not (math.isfinite(value) and minimum <= value <= maximum):
        raise UsageError(f"{name}={value} is not allowed; allowed: {allowed}", value=value, allowed=allowed)
    return value


def _clean(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):
        return _clean(value.item())     # a numpy float32 NaN is a Python NaN only now
    return value


def print_json(obj) -> None:
    json.dump(_clean(obj), sys.stdout, indent=2)
    sys.stdout.write("\n")


def table(title: str, columns: list[str], rows: list[list]) -> Table:
    t = Table(title=title)
    for c in columns:
        # fold, never cut with an ellipsis: a narrow terminal still shows every character
        t.add_column(c, justify="right" if c not in ("path", "what") else "left", overflow="fold")
    for r in rows:
        t.add_row(*[f"{v:.2f}" if isinstance(v, float) else str(v) for v in r])
    return t


def print_path_results(results, mode: str) -> None:
    """The table of data-path results (``PathResult``), each path's emulation or testbed
    note, and every QP error, as ``demo`` and ``testbed`` print them."""
    rows = [[r.path, r.messages, r.delivered, r.dropped, r.errors, r.bytes, r.latency_p50_us,
             r.latency_p99_us, r.throughput_gbps] for r in results]
    console.print(table(f"data paths ({mode} mode)", ["path", "messages", "delivered", "dropped",
                        "errors", "bytes", "lat p50 us", "lat p99 us", "Gb/s"], rows))
    for r in results:
        console.print(f"  {r.path}: {r.emulation}", soft_wrap=True)
        for qpn, e in r.qp_errors.items():
            console.print(f"  [red]{r.path} qp {qpn}: {e}[/red]", soft_wrap=True)


# --- progress ------------------------------------------------------------------------

class LineProgress:
    """Progress as plain lines on stderr, at most one every ``every_s`` seconds: for logs,
    where a live bar would show nothing until the end. Same calls as rich's ``Progress``
    (``add_task``, ``advance``, ``update``) for what the commands use. Inside ``with``, a
    step that takes long (one path of ``demo``) still gets its line every ``every_s``."""

    def __init__(self, every_s: float = 10.0, stream=None, *, quiet_start: bool = False):
        self.every_s = every_s
        # quiet_start (--json): no line for a task's start or a new description, only one
        # every every_s and at the end: a command that fails at once leaves one error line
        self.quiet_start = quiet_start
        self.stream = stream or sys.stderr
        self.tasks: dict[int, dict] = {}
        self._last_s = time.monotonic() if quiet_start else 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = None

    def __enter__(self):
        if self.every_s > 0:
            self._ticker = threading.Thread(target=self._tick, name="gw-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        return False

    def _tick(self) -> None:
        """The newest unfinished task's line, where no line came for ``every_s``."""
        while not self._stop.wait(self.every_s):
            running = [key for key, task in list(self.tasks.items())
                       if task["total"] is None or task["completed"] < task["total"]]
            if running:
                self._say(running[-1])

    def add_task(self, description: str, total=None, completed=0, **_) -> int:
        key = len(self.tasks)
        self.tasks[key] = {"description": description, "total": total, "completed": completed,
                           "started": time.monotonic()}
        self._say(key, force=not self.quiet_start)
        return key

    def update(self, key: int, *, description=None, advance=None, completed=None, **_) -> None:
        task = self.tasks[key]
        if description is not None:
            task["description"] = description
        if completed is not None:
            task["completed"] = completed
        if advance:
            task["completed"] += advance
        self._say(key, force=description is not None and not self.quiet_start)

    def advance(self, key: int, advance: float = 1) -> None:
        self.update(key, advance=advance)

    def _say(self, key: int, force: bool = False) -> None:
        with self._lock:    # the ticker's thread says lines too
            self._say_locked(key, force)

    def _say_locked(self, key: int, force: bool) -> None:
        now = time.monotonic()
        task = self.tasks[key]
        done = task["total"] is not None and task["completed"] >= task["total"]
        if not (force or done or now - self._last_s >= self.every_s):
            return
        self._last_s = now
        elapsed = now - task["started"]
        text = f"{task['description']}: {task['completed']:g}"
        if task["total"]:
            text += f"/{task['total']:g} ({100 * task['completed'] / task['total']:.0f} %)"
        text += f", {elapsed:.0f} s"
        if task["total"] and 0 < task["completed"] < task["total"]:
            text += f", about {elapsed * (task['total'] - task['completed']) / task['completed']:.0f} s left"
        print(text, file=self.stream, flush=True)


def progress(disable: bool = False, every_s: float = 10.0, *, as_json: bool = False):
    """A rich progress bar on stderr with elapsed time and an ETA where stderr is a terminal;
    a plain progress line every ``every_s`` seconds where it is a file or a pipe. Under
    ``--json`` (``as_json``) progress stays on stderr and stdout is left alone (not
    redirected through the bar), so that stdout holds the JSON document only."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    err = Console(stderr=True)
    if not disable and not err.is_terminal:
        return LineProgress(every_s, quiet_start=as_json)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=err, disable=disable, redirect_stdout=not as_json)


def status(message: str):
    """A spinner with ``message`` on stderr (never stdout, which ``--json`` keeps for the
    JSON document); its ``update(text)`` changes the message."""
    return Console(stderr=True).status(message, spinner="dots")


# --- provenance and result files -----------------------------------------------------

def provenance(command: str, parameters: dict, device: str) -> dict:
    """How a result was made: the command and its parameters, gpuwrite's version, the git
    commit (from a checkout), the device it ran on and the date and time (UTC)."""
    from gpuwrite.experiments.store import git_commit, gpuwrite_version

    return {"command": command, "parameters": _clean(parameters), "gpuwrite_version": gpuwrite_version(),
            "git_commit": git_commit(), "device": device,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def check_writable(path, name: str, *, folder: bool = False) -> Path:
    """``path`` unchanged once it is known to be usable before any work starts: a folder
    (``folder``) made if missing and in which a file can be made (a scratch file is made
    and removed again: an existing folder this user cannot write, or an immutable one,
    failed only after the work), or a file whose folder is made and which can be opened
    for writing (a file this check created is removed again); else a UsageError."""
    import tempfile

    path = Path(path)
    target = path if folder else path.parent
    try:
        target.mkdir(parents=True, exist_ok=True)
        if folder:
            handle, scratch = tempfile.mkstemp(prefix=".gpuwrite-check-", dir=target)
            os.close(handle)
            os.unlink(scratch)
        else:
            existed = path.exists()
            with open(path, "ab"):
                pass
            if not existed:
                path.unlink()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        where = target if folder else exc.filename or target   # not the scratch file's name
        raise UsageError(f"{name}={str(path)!r} is not allowed ({why}: {where}); allowed: a "
                         f"{'folder' if folder else 'file'} path this user can write", value=str(path),
                         allowed="a writable path") from None
    return path


def _same_file(a, b) -> bool:
    """Whether two paths name one file (through links and ``..``); False where either is
    missing."""
    try:
        return Path(a).resolve() == Path(b).resolve() or Path(a).samefile(b)
    except OSError:
        return False


def check_not_input(path, name: str, inputs: dict, written=None) -> None:
    """A UsageError where the output ``path`` (or the file ``written`` under it) is one of
    the ``inputs`` ({option: path}): writing it would overwrite the file the command reads,
    its comments and its values, silently."""
    if path is None:
        return
    target = path if written is None else written
    for option, source in inputs.items():
        if source is not None and str(source).strip() and _same_file(target, source):
            where = "it" if written is None else f"its {Path(written).name}"
            raise UsageError(f"{name}={str(path)!r} is not allowed ({where} is the {option} file this command "
                             "reads, which writing would overwrite); allowed: another path",
                             value=str(path), allowed=f"a path other than {option}'s")


def check_result_path(path, name: str = "--out") -> Path | None:
    """A result file name (.parquet or .csv), checked before any work starts."""
    if path is None:
        return None
    if str(path).strip() == "" or Path(path).suffix not in RESULT_SUFFIXES:
        raise UsageError(f"{name}={str(path)!r} is not allowed; allowed: a file ending in "
                         + " or ".join(RESULT_SUFFIXES), value=str(path), allowed=" or ".join(RESULT_SUFFIXES))
    if Path(path).is_dir():
        raise UsageError(f"{name}={str(path)!r} is not allowed (it is a directory); allowed: a file "
                         "ending in " + " or ".join(RESULT_SUFFIXES), value=str(path), allowed="a file")
    return check_writable(path, name)


def write_rows(rows: list[dict], path, prov: dict) -> Path:
    """Writes result rows as one tidy table (Parquet or CSV, by ``path``'s suffix), each row
    carrying the run's provenance as columns: ``command``, ``parameters`` (JSON),
    ``gpuwrite_version``, ``git_commit``, ``device``, ``date``.

    The one writer of ``demo --out``, ``model compare --out`` and ``sim --out``'s summary.
    """
    import pandas as pd

    path = check_result_path(path)
    flat = [{k: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v for k, v in _clean(row).items()}
            for row in rows]
    frame = pd.DataFrame(flat)
    for key, value in prov.items():
        frame[key] = json.dumps(value, sort_keys=True) if isinstance(value, dict) else value
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path


def require_capable_gpu() -> None:
    """A GPU the device verbs cannot compile for (``gpuwrite.cudaenv.check_capability``)
    as a command's "no usable GPU" (exit 3), before any work starts, not a traceback from
    the Context; nothing to check on the simulator."""
    from gpuwrite.cudaenv import MIN_COMPUTE_CAPABILITY, check_capability

    try:
        check_capability()
    except RuntimeError as exc:
        raise NoGPUError(str(exc), value=str(exc).split(";")[0],
                         allowed="compute capability {}.{} or newer, or the CUDA simulator".format(
                             *MIN_COMPUTE_CAPABILITY)) from None
