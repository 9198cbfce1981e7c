"""``gpuwrite sweep FILE``: run an experiment file's sweeps into one tidy table.

Runs the cross product of what the file varies, in parallel processes where that pays
(simulations), with a progress bar and an ETA; resumes where it stopped (every point is
cached under the SHA-256 of its resolved configuration); writes
experiments/results/<name>.parquet (rows measured on a GPU: results/gpu/<name>.parquet).
"""
from __future__ import annotations

from pathlib import Path

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import (add_json_flag, check_not_input, check_range, check_result_path, check_writable,
                                 console, print_json, provenance, table)

MAX_WORKERS = 1024


def progress_bar(as_json: bool):
    """A rich progress bar on stderr with an ETA; plain progress lines where stderr is a file.
    Under ``--json`` (``as_json``) too: stdout keeps the JSON document only."""
    from gpuwrite.cli.common import progress

    return progress(as_json=as_json)


def add_run_options(parser) -> None:
    """--results, --workers, --fresh and --json: shared by `sweep` and `figures`."""
    parser.add_argument("--results", default="experiments/results", help="results directory (default experiments/results)")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    parser.add_argument("--fresh", action="store_true", help="ignore stored results and compute every point again")
    add_json_flag(parser)


def check_workers(workers):
    if workers is not None:
        check_range("--workers", workers, 1, MAX_WORKERS)
    return workers


def check_dir_name(value: str, name: str) -> Path:
    """A directory a command would write into, named as one: not empty text (which would
    mean the current directory, silently) and not an existing file; nothing is made."""
    if not str(value).strip():
        raise UsageError(f"{name}={value!r} is not allowed; allowed: a directory path (e.g. experiments/results)",
                         value=value, allowed="a directory path")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{name}={value!r} is not allowed (it is a file); allowed: a directory",
                         value=value, allowed="a directory")
    return path


def check_dir(value: str, name: str) -> Path:
    """A directory a command writes into: ``check_dir_name``'s, made if missing and writable."""
    return check_writable(check_dir_name(value, name), name, folder=True)


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run an experiment file's sweeps into a tidy table (resumable)",
                       description=__doc__.splitlines()[0])
    p.add_argument("file", metavar="FILE", help="experiment file (TOML), e.g. experiments/fig1_latency.toml")
    p.add_argument("--sweep", action="append", dest="sweeps", metavar="NAME",
                   help="run only this sweep of the file (repeatable)")
    p.add_argument("--out", help="write the rows of this run to this file instead (.parquet or .csv)")
    p.add_argument("--csv", action="store_true", help="also write a CSV beside each Parquet table")
    add_run_options(p)
    p.set_defaults(func=main)


def main(args) -> int:
    from gpuwrite.experiments.spec import SpecError, load_spec
    from gpuwrite.experiments.sweep import Pool, run_spec

    workers = check_workers(args.workers)
    check_result_path(args.out)
    check_dir(args.results, "--results")
    try:
        spec = load_spec(args.file)
        if args.out is not None:
            # --out writes this run's rows alone: onto the stored table (or its CSV), it
            # replaced the table the run resumes from, other sweeps' rows lost, unmerged
            from gpuwrite.experiments.store import table_path
            stored = [table_path(args.results, spec.name, gpu=gpu) for gpu in (False, True)]
            check_not_input(args.out, "--out", {f"stored table {path}": path for path in
                                                [*stored, *(p.with_suffix(".csv") for p in stored)]})
        with progress_bar(args.json) as progress, Pool(workers) as pool:
            ran = run_spec(spec, args.results, only=args.sweeps, fresh=args.fresh,
                           pool=pool, progress=progress, csv=args.csv, out=args.out)
    except SpecError as exc:     # the value and what is allowed, where the error holds them, kept
        raise UsageError(str(exc), value=exc.value, allowed=exc.allowed) from None
    devices = sorted({r.device for r in ran["reports"]})
    data = {"file": str(spec.path), "rows": ran["rows"], "tables": [str(p) for p in ran["tables"]],
            "sweeps": [r.to_dict() for r in ran["reports"]],
            "provenance": provenance("sweep", {"file": str(spec.path), "sweeps": args.sweeps, "fresh": args.fresh,
                                               "results": args.results, "out": args.out}, ", ".join(devices))}
    if args.json:
        print_json(data)
        return 0
    rows = [[r.sweep, r.backend, r.device, r.points, r.computed, r.cached, r.skipped or "-", r.seconds]
            for r in ran["reports"]]
    console.print(table(f"gpuwrite sweep {spec.path}", ["what", "backend", "device", "points", "computed",
                                                         "cached", "skipped", "seconds"], rows))
    for path in ran["tables"]:
        console.print(f"wrote {path}")
    return 0
