"""Runs the sweeps of an experiment file, resuming from stored results, into tidy tables.

``run_spec(spec, results_dir)`` resolves every point, looks each configuration's hash up
in what is stored (the tables themselves and the per-chunk cache an interrupted run left),
computes only what is missing, and writes the tables (``store``). Simulations run in
parallel worker processes (``Pool``, spawn-safe); analytic model points take microseconds
and run in this process; emulated runs run here one after another, because runs that
share a GPU would disturb each other's timings.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import math
import multiprocessing
import os
import pickle
import re
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpuwrite.experiments import backends, store
from gpuwrite.experiments.spec import ExperimentSpec, SpecError, Sweep, allowed_keys, config_hash, resolve


@dataclass
class SweepReport:
    """What one sweep did: its points, how many were computed now and how many were stored."""

    file: str
    sweep: str
    backend: str
    device: str
    points: int
    computed: int = 0
    cached: int = 0
    skipped: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class PointError(ValueError):
    """Point ``position`` of chunk ``chunk`` was refused: ``message`` (a ValueError, such as
    the model's ParamError: a value the point cannot run with). Plain arguments only, so
    that it pickles from a worker process to the parent (a ParamError's __init__ takes three
    arguments, and one that could not be unpickled there killed the pool's result thread:
    the sweep waited for its chunk for ever)."""

    def __init__(self, chunk: int, position: int, message: str):
        super().__init__(chunk, position, message)
        self.chunk, self.position, self.message = chunk, position, message

    def __str__(self) -> str:
        return self.message


def _compute_chunk(configs: list[dict], index: int = 0) -> list[pd.DataFrame]:
    """Worker entry point: measured columns of each configuration, in order. A point whose
    values are refused raises PointError, which says which (``index``: the chunk's); other
    errors pass as they are (a missing GPU, an interrupt)."""
    out = []
    for position, config in enumerate(configs):
        try:
            out.append(backends.compute(config))
        except ValueError as exc:
            raise PointError(index, position, str(exc)) from exc
    return out


def _worker_init(parent_pid: int) -> None:
    """Each worker: leave Ctrl-C to the parent (a terminal sends SIGINT to the whole process
    group; the parent ends the pool), and die with the parent (Linux ``PR_SET_PDEATHSIG``),
    so that no worker outlives a killed command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1   # <linux/prctl.h>
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's terminate() still ends the pool
        pass
    if os.getppid() != parent_pid:   # the parent died before prctl took effect
        os._exit(1)


def _start_pool(workers: int):
    """Spawned workers that ignore SIGINT from their first instruction: the disposition is
    set to ignored around their start, which exec keeps (a Ctrl-C while a worker is still
    importing would otherwise print its traceback). A blocked signal would not do: the
    spawned interpreter gets it during its start-up. A Ctrl-C in these few milliseconds is
    lost; the next one counts."""
    context = multiprocessing.get_context("spawn")
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:   # not the main thread: the initializer still ignores it
        previous = None
    try:
        return context.Pool(workers, initializer=_worker_init, initargs=(os.getpid(),))
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


class WorkerLost(RuntimeError):
    """A worker process died while the sweep waited for its chunk (killed: most often by
    the kernel, for memory). ``multiprocessing.Pool`` starts another in its place but never
    reports the chunk the dead one held, so the sweep would wait for it for ever."""


# How often a sweep waiting for a chunk looks for dead workers.
WATCH_S = 1.0


class Pool:
    """A spawn-context process pool, started on first use and shared by every sweep of a run.

    Closing it after an error or an interrupt terminates the workers at once (a running
    simulation is abandoned; finished chunks are already in the cache), so that none is
    left behind.
    """

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._pool = None
        self._workers: list = []

    def map(self, chunks: list[list[dict]]):
        """Yields (chunk index, results) as chunks finish; in this process if one worker.
        Raises WorkerLost if a worker dies while the chunks are out."""
        if self.workers == 1 or len(chunks) == 1:
            for index, chunk in enumerate(chunks):
                yield index, _compute_chunk(chunk, index)
            return
        if self._pool is None:
            before = {p.pid for p in multiprocessing.active_children()}
            self._pool = _start_pool(self.workers)
            # The workers it started, watched through their Process objects (the pool joins
            # a dead one and replaces it, which sets the exit code these objects report).
            self._workers = [p for p in multiprocessing.active_children() if p.pid not in before]
        results = self._pool.imap_unordered(_indexed_chunk, list(enumerate(chunks)))
        for _ in chunks:
            while True:
                try:
                    item = results.next(timeout=WATCH_S)
                    break
                except multiprocessing.TimeoutError:
                    self._check_workers()
            yield item

    def _check_workers(self) -> None:
        dead = [p for p in self._workers if p.exitcode not in (None, 0)]
        # Replacements are watched too: a chunk handed to one is lost as well if it dies.
        known = {p.pid for p in self._workers}
        self._workers += [p for p in multiprocessing.active_children() if p.pid not in known]
        if dead:
            how = ", ".join(f"signal {-p.exitcode}" if p.exitcode < 0 else f"status {p.exitcode}"
                            for p in dead)
            raise WorkerLost(f"{len(dead)} worker process(es) died ({how}; SIGKILL is signal 9, "
                             "as the kernel kills for memory) while computing: their points are "
                             "lost; the points finished are kept (rerun to resume), with fewer "
                             "--workers or smaller points")

    def close(self, clean: bool = True) -> None:
        if self._pool is not None:
            if clean:
                self._pool.close()
            else:
                self._pool.terminate()
            self._pool.join()
            self._pool = None
            self._workers = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(clean=exc_type is None)


# How the emulated runner (gpuwrite/paths) words a refused value: "KEY=VALUE: allowed WHAT"
# (or "KEY=VALUE: WHAT"), and a message size an inline WQE cannot hold.
_KEYED_REFUSAL = re.compile(r"(?P<key>[a-z_]+)=(?P<value>[^:]+): (?:allowed |must be )?(?P<allowed>.+)", re.S)
_INLINE_REFUSAL = re.compile(r"message size (?P<value>\d+) bytes is too large for an inline WQE: at most "
                             r"(?P<most>\d+)")


def _refusal(message: str, config: dict) -> tuple[str, object, str | None]:
    """(message, value, allowed) of a point's refusal, in the CLI's form ``KEY=VALUE is not
    allowed; allowed: WHAT`` naming the experiment file's key, its value as the file gave it
    (``config``: the point's keys) and what is allowed. A message of another form is kept
    as it is (the CLI reads a ParamError's ``KEY=VALUE is not allowed; allowed: ...``)."""
    if "is not allowed" in message:
        return message, None, None
    inline = _INLINE_REFUSAL.fullmatch(message.strip())
    if inline:
        size = int(inline["value"])
        allowed = f"at most {int(inline['most']):,} bytes on gpu_push_inline (an inline WQE)"
        return (f"size_bytes={size} is not allowed (too large for an inline WQE); allowed: {allowed}",
                config.get("size_bytes", size), allowed)
    keyed = _KEYED_REFUSAL.fullmatch(message.strip())
    if keyed:
        key, allowed = keyed["key"], keyed["allowed"]
        value = config.get(key, keyed["value"].strip().strip("'"))
        return f"{key}={value!r} is not allowed; allowed: {allowed}", value, allowed
    return message, None, None


def _indexed_chunk(item: tuple[int, list[dict]]) -> tuple[int, list[pd.DataFrame]]:
    index, chunk = item
    try:
        return index, _compute_chunk(chunk, index)
    except PointError:
        raise
    except Exception as exc:
        raise _picklable(exc) from None


def _picklable(exc: Exception) -> Exception:
    """``exc``, or a RuntimeError with its message where it cannot be rebuilt from a pickle
    (a worker's error travels to the parent pickled; see PointError)."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _today() -> str:
    return datetime.date.today().isoformat()


def _stored_rows(spec: ExperimentSpec, results_dir: Path) -> dict[str, pd.DataFrame]:
    """Measured rows (and their meta columns) by configuration hash, from the tables and the chunk cache."""
    measured = []
    for gpu in (False, True):
        table = store.read_table(store.table_path(results_dir, spec.name, gpu=gpu))
        if table is None or "config_hash" not in table:
            continue
        # One sweep at a time: the same configuration can stand in two sweeps of one table
        # (Fig. 6's sensitivity sweep holds a point of its throughput sweep), and its rows
        # (several for a time series) must come from one of them, not from both.
        for (backend, measure, _), part in table.groupby(["backend", "measure", "sweep"], sort=False):
            drop = set(store.FRAME_COLUMNS) | set(allowed_keys(backend, measure or None))
            measured.append(part.drop(columns=[c for c in part.columns if c in drop]))
    folder = store.cache_dir(results_dir, spec.name)
    measured += [store.read_table(f, store.CHUNK_COLUMNS) for f in sorted(folder.glob("*.parquet"))] \
        if folder.is_dir() else []
    out: dict[str, pd.DataFrame] = {}
    for frame in measured:
        for key, positions in frame.groupby("config_hash", sort=False).indices.items():
            out.setdefault(key, frame.iloc[positions])
    return out


def _plain(value):
    """A table cell as a comparable Python value (NaN and NA as None)."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _point_key(sweep: Sweep, values) -> tuple:
    return tuple(_plain(values.get(column)) for column in sweep.columns)


def _stored_points(spec: ExperimentSpec, results_dir: Path) -> dict[tuple, pd.DataFrame]:
    """Stored rows (measured and meta columns) by (sweep name, configuration columns' values):
    finds the stored row of a point whose configuration hash changed with the code."""
    out: dict[tuple, pd.DataFrame] = {}
    for gpu in (False, True):
        table = store.read_table(store.table_path(results_dir, spec.name, gpu=gpu))
        if table is None or "sweep" not in table:
            continue
        for sweep in spec.sweeps:
            part = table[table["sweep"] == sweep.name]
            if not len(part) or any(column not in part for column in sweep.columns):
                continue
            drop = set(store.FRAME_COLUMNS) | set(allowed_keys(sweep.backend, sweep.measure))
            measured = part.drop(columns=[c for c in part.columns if c in drop])
            keys = [(sweep.name, device, *(_plain(v) for v in row))
                    for device, row in zip(part["device"], part[sweep.columns].itertuples(index=False))]
            groups: dict[tuple, list[int]] = {}
            for position, key in enumerate(keys):
                groups.setdefault(key, []).append(position)
            for key, positions in groups.items():
                out.setdefault(key, measured.iloc[positions])
    return out


def _same_measurement(new: pd.DataFrame, old: pd.DataFrame | None) -> bool:
    """Whether a recomputed point's measured columns equal a stored row's, value for value."""
    if old is None:
        return False
    old = old.drop(columns=[c for c in store.META_COLUMNS if c in old]).dropna(axis=1, how="all")
    new = new.dropna(axis=1, how="all")
    if set(old.columns) != set(new.columns) or len(old) != len(new):
        return False
    try:
        pd.testing.assert_frame_equal(new.reset_index(drop=True), old[list(new.columns)].reset_index(drop=True),
                                      check_dtype=False, check_exact=True)
    except (AssertionError, TypeError, ValueError):
        return False
    return True


def _without_empty_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Empty measured columns go; meta columns stay even when empty (an installed package
    has no git commit: the column says None rather than vanishing)."""
    return frame.drop(columns=[c for c in frame.columns if c not in store.META_COLUMNS and frame[c].isna().all()])


def _kept_meta(old: pd.DataFrame, digest: str) -> pd.DataFrame:
    """A stored row whose values the current code reproduces: its date, version and commit
    stay (when the numbers were first made), its configuration hash becomes today's.

    A row first made by uncommitted code (``+dirty``) or outside a checkout names no code
    anyone can check out; reproduced by a clean checkout, it takes that commit instead:
    the first committed code known to make these numbers."""
    frame = _without_empty_columns(old).reset_index(drop=True).copy()
    frame["config_hash"] = digest
    now = store.git_commit()
    if now and not now.endswith(store.DIRTY):
        stamped = frame["git_commit"] if "git_commit" in frame else pd.Series([None] * len(frame))
        untraceable = stamped.isna() | stamped.astype(str).str.endswith(store.DIRTY)
        frame["git_commit"] = stamped.where(~untraceable, now).to_numpy()
    return frame


def _assemble(spec: ExperimentSpec, sweep: Sweep, points: list[dict], measured: list[pd.DataFrame]) -> pd.DataFrame:
    """Frame columns, the sweep's configuration columns, then measured and meta columns.

    Columns no row of this sweep fills (left over from other sweeps' stored rows) are dropped.
    """
    if not points:
        return pd.DataFrame()
    body = pd.concat(measured, ignore_index=True)
    point_of_row = np.repeat(np.arange(len(points)), [len(m) for m in measured])
    head = pd.DataFrame({"figure": spec.name, "sweep": sweep.name, "backend": sweep.backend,
                         "measure": sweep.measure or "", "output": sweep.output}, index=body.index)
    config = pd.DataFrame({column: pd.Series([p.get(column) for p in points]).take(point_of_row).to_numpy()
                           for column in sweep.columns}, index=body.index).infer_objects()
    body = _without_empty_columns(body)
    meta = [c for c in store.META_COLUMNS if c in body]
    return pd.concat([head, config, body.drop(columns=meta), body[meta]], axis=1)


def _with_meta(measured: pd.DataFrame, device: str, digest: str) -> pd.DataFrame:
    frame = measured.copy()
    frame["device"] = device
    frame["date"] = _today()
    frame["gpuwrite_version"] = store.gpuwrite_version()
    frame["git_commit"] = store.git_commit()
    frame["config_hash"] = digest
    return frame


def _chunks(sweep: Sweep, missing: list[int]) -> list[list[int]]:
    if sweep.measure == "simulate":
        size = 1
    else:  # analytic: a few chunks, so the progress bar moves
        size = max(1, math.ceil(len(missing) / 8))
    return [missing[i:i + size] for i in range(0, len(missing), size)]


def run_sweep(spec: ExperimentSpec, sweep: Sweep, results_dir: Path, stored: dict, pool: Pool,
              device: str, progress=None, stored_points: dict | None = None) -> tuple[pd.DataFrame, SweepReport]:
    """Rows of every point of ``sweep``, computing the ones ``stored`` lacks."""
    started = time.perf_counter()
    run_device = device if sweep.backend == "emulated" else backends.MODEL_DEVICE
    report = SweepReport(str(spec.path), sweep.name, sweep.backend, run_device, 0)
    if sweep.require == "gpu" and device == backends.SIMULATOR_DEVICE:
        report.skipped = "needs a GPU; only the CUDA simulator is here"
        return pd.DataFrame(), report
    points = sweep.points(run_device)
    configs = [resolve(sweep, values, device=run_device) for values in points]
    hashes = [config_hash(config) for config in configs]
    report.points = len(points)
    measured: dict[int, pd.DataFrame] = {}
    missing = []
    for index, digest in enumerate(hashes):
        if digest in stored:
            measured[index] = stored[digest]
        else:
            missing.append(index)
    report.cached = len(measured)
    task = progress.add_task(f"{spec.name}: {sweep.name}", total=len(points), completed=len(measured)) \
        if progress is not None else None
    groups = _chunks(sweep, missing)
    chunk_configs = [[configs[i] for i in group] for group in groups]
    cache = store.cache_dir(results_dir, spec.name)
    if sweep.backend == "model" and sweep.measure == "simulate":
        results = pool.map(chunk_configs)
    else:  # analytic points and emulated runs: here, in order
        results = ((k, _compute_chunk(chunk, k)) for k, chunk in enumerate(chunk_configs))
    try:
        for k, frames in results:
            group = groups[k]
            done = []
            for i, frame in zip(group, frames):
                old = (stored_points or {}).get((sweep.name, run_device, *_point_key(sweep, points[i])))
                done.append(_kept_meta(old, hashes[i]) if _same_measurement(frame, old)
                            else _with_meta(frame, run_device, hashes[i]))
            for i, frame in zip(group, done):
                measured[i] = frame
            cache.mkdir(parents=True, exist_ok=True)
            name = hashlib.sha256("".join(hashes[i] for i in group).encode()).hexdigest()[:16]
            chunk = io.BytesIO()
            store.tidy(pd.concat(done, ignore_index=True)).to_parquet(chunk)
            store.write_atomically(cache / f"{sweep.name}-{name}.parquet", chunk.getvalue())
            report.computed += len(group)
            if task is not None:
                progress.advance(task, len(group))
    except ValueError as exc:
        where = f"{spec.path}: sweep {sweep.name!r}"
        message, value, allowed = str(exc), getattr(exc, "value", None), getattr(exc, "allowed", None)
        if isinstance(exc, PointError):     # a point's values refused: name the point
            values = points[groups[exc.chunk][exc.position]]
            point = ", ".join(f"{name}={values[name]!r}" for name in sweep.vary)
            where += f", point {point}" if point else ""
            message, value, allowed = _refusal(message, {**sweep.fixed, **values})
        raise SpecError(f"{where}: {message}", value=value, allowed=allowed) from exc
    rows = _assemble(spec, sweep, points, [measured[i] for i in range(len(points))])
    report.seconds = time.perf_counter() - started
    return rows, report


def _merge(old: pd.DataFrame | None, new: pd.DataFrame, spec: ExperimentSpec) -> pd.DataFrame:
    """The stored table with the sweeps in ``new`` replaced; sweeps no longer in the file dropped."""
    names = {s.name for s in spec.sweeps}
    replaced = set(new["sweep"]) if len(new) else set()
    parts = []
    if old is not None and len(old):
        parts.append(old[old["sweep"].isin(names - replaced)])
    if len(new):
        parts.append(new)
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame()
    merged = pd.concat(parts, ignore_index=True)
    order = {s.name: k for k, s in enumerate(spec.sweeps)}
    return merged.sort_values("sweep", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def _measured_on_gpu(frame: pd.DataFrame) -> pd.Series:
    """Rows an emulated run measured on a real GPU (they go to ``results/gpu/``)."""
    return (frame["backend"] == "emulated") & (frame["device"] != backends.SIMULATOR_DEVICE)


def run_spec(spec: ExperimentSpec, results_dir: str | Path = store.DEFAULT_RESULTS, *,
             only: list[str] | None = None, fresh: bool = False, pool: Pool | None = None,
             progress=None, csv: bool = False, out: str | Path | None = None) -> dict:
    """Runs the sweeps of ``spec`` (or those named in ``only``) and writes the tables.

    Returns {"reports": [SweepReport], "tables": [paths written], "rows": rows in this run}.
    ``fresh`` ignores everything stored and computes every point again.
    """
    results_dir = Path(results_dir)
    # a sweep named twice runs once: twice, its rows stood twice in the stored table
    selected = [spec.sweep(name) for name in dict.fromkeys(only)] if only else list(spec.sweeps)
    device = backends.device_name() if any(s.backend == "emulated" for s in selected) else backends.MODEL_DEVICE
    stored = {} if fresh else _stored_rows(spec, results_dir)
    stored_points = {} if fresh else _stored_points(spec, results_dir)
    if fresh and out is None:
        # The new rows are merged into the stored tables they belong to at the end: a table
        # that cannot be read is named now, not after every point has been computed.
        on_gpu = device != backends.SIMULATOR_DEVICE and any(s.backend == "emulated" for s in selected)
        for gpu in (False, True) if on_gpu else (False,):
            store.read_table(store.table_path(results_dir, spec.name, gpu=gpu))
    own_pool = pool is None
    pool = pool or Pool()
    frames, reports = [], []
    clean = False
    try:
        for sweep in selected:
            frame, report = run_sweep(spec, sweep, results_dir, stored, pool, device, progress, stored_points)
            frames.append(frame)
            reports.append(report)
        clean = True
    finally:
        if own_pool:
            pool.close(clean)
    new = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) \
        else pd.DataFrame(columns=["sweep", "device", "backend"])
    written = []
    if out is not None:
        written += store.write_table(new, Path(out), csv=csv)
        return {"reports": reports, "tables": written, "rows": len(new)}
    with _table_lock(results_dir, spec.name):
        for gpu in (False, True):
            # Each table is made of its own sweeps' frames: concatenated with the model's,
            # a GPU table's integer columns came out float and it gained the model's
            # columns, so `figures` on a GPU machine rewrote it unchanged (session 13).
            pieces = [f[_measured_on_gpu(f) == gpu] for f in frames if len(f)]
            pieces = [p for p in pieces if len(p)]
            if pieces:  # a table this run has no rows for stays as it is, byte for byte
                part = pd.concat(pieces, ignore_index=True)
                path = store.table_path(results_dir, spec.name, gpu=gpu)
                written += store.write_table(_merge(store.read_table(path), part, spec), path, csv=csv)
        folder = store.cache_dir(results_dir, spec.name)
        # the tables now hold these sweeps' rows; a chunk is "<sweep>-<hash>.parquet", and
        # it is the whole name that must match (a glob "a-*" also took sweep "a-b"'s chunks)
        done = {sweep.name for sweep in selected}
        for file in folder.glob("*.parquet") if folder.is_dir() else ():
            if file.stem.rsplit("-", 1)[0] in done:
                file.unlink()
    return {"reports": reports, "tables": written, "rows": len(new)}


@contextlib.contextmanager
def _table_lock(results_dir: Path, name: str):
    """Holds ``<results>/cache/<name>.lock`` while a run reads, merges and writes the tables
    of ``name``: two sweeps of one file run at once (``sweep --sweep a`` beside ``--sweep b``,
    or beside ``figures``) each merged its rows into the table it had read, and the one
    that wrote last dropped the other's rows (and that run had deleted its chunks)."""
    try:
        import fcntl

        folder = store.cache_dir(results_dir, name).parent
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / f"{name}.lock", "a")
    except (ImportError, OSError):   # not POSIX, or a folder this user cannot write: no lock
        yield                        # (a run that writes nothing still succeeds there)
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _hashes_now(sweep: Sweep, device: str) -> dict[str, tuple]:
    """The configuration hashes the code now gives the points ``sweep`` runs on ``device``
    (what a stored table's ``config_hash`` column must hold to be current), each with its
    point's configuration columns."""
    return {config_hash(resolve(sweep, values, device=device)): _point_key(sweep, values)
            for values in sweep.points(device)}


def _rows_unlike_their_point(sweep: Sweep, rows: pd.DataFrame, points: dict[str, tuple]) -> int:
    """How many ``rows`` are not what their ``config_hash`` says: configuration columns
    other than that point's (a size edited by hand kept its hash, so the figure drew a
    measurement at a size it was not made at, and nothing said so), or a second row of a
    point of a one-row-a-point sweep (a row copied by hand)."""
    if any(column not in rows for column in sweep.columns):
        return len(rows)
    keys = [tuple(_plain(v) for v in row) for row in rows[sweep.columns].itertuples(index=False)]
    unlike = sum(1 for digest, key in zip(rows["config_hash"], keys) if digest in points and points[digest] != key)
    if sweep.output == "summary":
        unlike += int(rows["config_hash"].duplicated().sum())
    return unlike


def _unlike_line(path, sweep: Sweep, unlike: int, n_rows: int, remedy: str) -> str:
    """``--check``'s line for rows that are not the point their hash names."""
    return (f"{path}: sweep {sweep.name!r}: {unlike} of {n_rows} rows are not the point their config_hash "
            f"names (configuration columns changed, or a row repeated: edited by hand?); {remedy}")


def gpu_rows_of_other_code(spec: ExperimentSpec, results_dir: str | Path = store.DEFAULT_RESULTS) -> list[str]:
    """What in the GPU table of ``spec`` (``<results>/gpu/<name>.parquet``) was not measured
    with this code and this file: one line per sweep whose stored rows hold configuration
    hashes the current code does not give for that sweep's points on the rows' device (a
    changed emulated path, device verb or engine, or a changed point, since the GPU
    measured them). A CPU machine cannot measure them again; it can say so."""
    results_dir = Path(results_dir)
    path = store.table_path(results_dir, spec.name, gpu=True)
    table = store.read_table(path)
    if table is None or "config_hash" not in table:
        return []
    out = []
    for sweep in spec.sweeps:
        rows = table[table["sweep"] == sweep.name]
        if sweep.backend != "emulated" or not len(rows):
            continue
        now = {device: _hashes_now(sweep, device) for device in set(rows["device"])}
        want = {h for points in now.values() for h in points}
        have = set(rows["config_hash"].dropna())
        if have - want or want - have:
            out.append(f"{path}: sweep {sweep.name!r}: {len(have - want)} of {len(have)} measured points "
                       f"are not what the code now runs, {len(want - have)} points are not measured; "
                       "run scripts/gpu_experiments.sh on a GPU to measure them with this code")
        unlike = sum(_rows_unlike_their_point(sweep, rows[rows["device"] == device], points)
                     for device, points in now.items())
        if unlike:
            out.append(_unlike_line(path, sweep, unlike, len(rows), "restore the table from git, or measure "
                                    "it again with scripts/gpu_experiments.sh"))
    return out


def stale_tables(spec: ExperimentSpec, results_dir: str | Path = store.DEFAULT_RESULTS) -> list[str]:
    """What is stale in the regenerable table of ``spec`` (``<results>/<name>.parquet``): one
    line per sweep whose stored configuration hashes differ from those the code computes now
    (a changed model or engine, a changed file, a missing table). Nothing is computed; GPU
    tables are left out (a CPU machine cannot remake them)."""
    results_dir = Path(results_dir)
    path = store.table_path(results_dir, spec.name)
    table = store.read_table(path)
    out = []
    for sweep in spec.sweeps:
        if sweep.require == "gpu":
            continue
        device = backends.MODEL_DEVICE if sweep.backend == "model" else backends.SIMULATOR_DEVICE
        points = _hashes_now(sweep, device)
        want = set(points)
        rows = None if table is None or "config_hash" not in table else table[table["sweep"] == sweep.name]
        have = set() if rows is None else set(rows["config_hash"].dropna())
        if want != have:
            out.append(f"{path}: sweep {sweep.name!r}: {len(want - have)} of {len(want)} points are not "
                       f"stored as the code now computes them ({len(have - want)} stored hashes are "
                       "outdated); run gpuwrite figures (or gpuwrite sweep) to update the table")
        unlike = 0 if rows is None else _rows_unlike_their_point(sweep, rows, points)
        if unlike:
            out.append(_unlike_line(path, sweep, unlike, len(rows),
                                    "run gpuwrite sweep --fresh on the file to compute them again"))
    return out
