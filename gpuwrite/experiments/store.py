"""Where results live, and the columns every row carries.

One tidy table per experiment file: ``<results>/<name>.parquet`` holds what any machine
can regenerate (the model, and emulated runs on the CUDA simulator, labelled
``device = "cudasim"``); ``<results>/gpu/<name>.parquet`` holds rows measured on a GPU,
which are committed because a CPU-only machine cannot make them again. Per-chunk files
under ``<results>/cache/<name>/`` let an interrupted sweep resume.

Every row: ``figure`` (the file's name), ``sweep``, ``backend``, ``measure``, ``output``,
the configuration columns the sweep names, the measured columns, then ``device`` (a GPU's
name, ``cudasim`` or ``model``), ``date``, ``gpuwrite_version``, ``git_commit`` (the
checkout's commit, ``+dirty`` with uncommitted changes; for an installed package the commit
it was built from, empty where it was built from no checkout)
and ``config_hash`` (the SHA-256 of the point's whole resolved configuration, which holds
every parameter, so a row says exactly how it was made).

A recomputed point whose measured values equal the stored row's keeps that row's
``date``, ``gpuwrite_version`` and ``git_commit`` (when and by what the numbers were first
made) and takes the new ``config_hash``; where that commit was ``+dirty`` (or none) and
the checkout recomputing it is clean, the row takes the clean commit: the first committed
code known to reproduce it.
"""
from __future__ import annotations

import functools
import io
import os
from pathlib import Path

import pandas as pd

from gpuwrite._commit import DIRTY, built_commit, checkout_commit  # noqa: F401 (DIRTY: store.DIRTY)

FRAME_COLUMNS = ("figure", "sweep", "backend", "measure", "output")
META_COLUMNS = ("device", "date", "gpuwrite_version", "git_commit", "config_hash")
DEFAULT_RESULTS = Path("experiments") / "results"


def gpuwrite_version() -> str:
    """The installed gpuwrite's version, or pyproject.toml's beside this checkout."""
    from importlib import metadata

    try:
        return metadata.version("gpuwrite")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        for line in pyproject.read_text().splitlines() if pyproject.is_file() else ():
            if line.startswith("version"):
                return line.split("=", 1)[1].strip().strip('"')
        return "unknown"


@functools.lru_cache(maxsize=None)
def git_commit() -> str | None:
    """The commit of the checkout gpuwrite runs from (``+dirty`` with uncommitted changes to
    tracked files); for an installed package, the commit it was built from (setup.py
    writes it in), or None where it was built from no checkout. ``GPUWRITE_GIT_COMMIT``
    names it instead for a copy of a checkout whose ``.git`` is not its own (the GPU
    machines receive the working tree beside an older ``.git``)."""
    if os.environ.get("GPUWRITE_GIT_COMMIT"):
        return os.environ["GPUWRITE_GIT_COMMIT"]
    package = Path(__file__).resolve().parents[1]
    root = package.parent
    if (root / ".git").exists():
        return checkout_commit(root)
    return built_commit(package)


def provenance() -> dict:
    """The code a measurement ran: gpuwrite's version and commit (``git_commit``), for a
    stored result to name what it measured (both benches store it)."""
    return {"gpuwrite_version": gpuwrite_version(), "git_commit": git_commit()}


def table_path(results_dir: Path, name: str, gpu: bool = False) -> Path:
    return Path(results_dir) / ("gpu" if gpu else "") / f"{name}.parquet"


def cache_dir(results_dir: Path, name: str) -> Path:
    return Path(results_dir) / "cache" / name


# The columns the code reads of every stored table (and of a cache chunk, its hashes): a
# Parquet file without them is no table gpuwrite wrote (another program's, copied there),
# and was a KeyError only after every point had been computed.
TABLE_COLUMNS = ("sweep", "backend", "measure", "device", "config_hash")
CHUNK_COLUMNS = ("config_hash",)


def _not_a_table(path: Path, why: str):
    from gpuwrite.experiments.spec import SpecError

    return SpecError(f"stored table {str(path)!r} is not allowed ({why}); allowed: a table gpuwrite wrote "
                     "(move this file away and the sweep computes its points again)")


def read_table(path: Path, required: tuple[str, ...] = TABLE_COLUMNS) -> pd.DataFrame | None:
    """A stored table (Parquet, or CSV by its suffix); None where there is none. A file that
    is not a table (cut short, a Git LFS pointer, or a table without the ``required``
    columns, which another program wrote) is a SpecError naming it."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        if path.suffix == ".csv":
            table = pd.read_csv(path)
        else:
            table = pd.read_parquet(path)
    except Exception as exc:    # pyarrow's and pandas' errors share no base class but Exception
        raise _not_a_table(path, " ".join(str(exc).split()) or type(exc).__name__) from None
    missing = [column for column in required if column not in table.columns]
    if missing:
        raise _not_a_table(path, f"it lacks the column(s) {', '.join(map(repr, missing))}")
    return table


def tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """Meta columns last; object columns that mix types become nullable typed columns (Parquet)."""
    meta = [c for c in META_COLUMNS if c in frame]
    out = frame[[c for c in frame.columns if c not in meta] + meta].reset_index(drop=True)
    for column in out.columns:
        if out[column].dtype == object:
            kinds = {type(v) for v in out[column] if v is not None and v == v}
            if kinds and (len(kinds) > 1 or kinds == {bool}):
                out[column] = out[column].convert_dtypes()
                if out[column].dtype == object:
                    out[column] = out[column].astype(str)
    return out


def write_table(frame: pd.DataFrame, path: Path, csv: bool = False) -> list[Path]:
    """Writes the table as Parquet (and CSV beside it on request); returns the files written.

    A file whose bytes would not change is left untouched (not even its modification
    time), so regenerating identical results changes no tracked file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = tidy(frame)
    if path.suffix == ".csv":
        _write_if_changed(path, frame.to_csv(index=False).encode())
        return [path]
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    data = buffer.getvalue()
    # The same bytes need no parse; other bytes may still hold the same table.
    if not (path.is_file() and path.read_bytes() == data) and not _same_table(path, frame):
        _write_if_changed(path, data)
    written = [path]
    if csv:
        _write_if_changed(path.with_suffix(".csv"), frame.to_csv(index=False).encode())
        written.append(path.with_suffix(".csv"))
    return written


def _same_table(path: Path, frame: pd.DataFrame) -> bool:
    """Whether the Parquet file at ``path`` holds exactly ``frame`` (values, dtypes, column
    order). Another pyarrow or pandas writes other bytes for the same table (its version is
    in the file's metadata), so a GPU image rewrote every table it merged into, unchanged
    (session 13); comparing the tables keeps a rerun from touching a tracked file there."""
    if not path.is_file():
        return False
    try:
        stored = tidy(pd.read_parquet(path))
    except Exception:    # unreadable or not Parquet: write it anew
        return False
    return list(stored.columns) == list(frame.columns) and \
        list(stored.dtypes) == list(frame.dtypes) and stored.equals(frame)


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return
    write_atomically(path, data)


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` into ``path`` whole or not at all: written beside it under another name,
    then renamed over it. Written in place, a full disk, a kill or a crash mid-write left a
    stored table cut short (a GPU table no CPU can make again), and a reader running at
    the same time read half a file."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


def load_results(results_dir: Path, name: str) -> pd.DataFrame:
    """Every stored row of an experiment: the regenerable table and the GPU-measured one."""
    parts = [t for t in (read_table(table_path(results_dir, name)),
                         read_table(table_path(results_dir, name, gpu=True))) if t is not None]
    if not parts:
        return pd.DataFrame(columns=[*FRAME_COLUMNS, *META_COLUMNS])
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
