"""``gpuwrite figures``: regenerate every figure from stored results (PNG and PDF).

Reads each experiment file in experiments/ that names a figure, runs whatever of its
sweeps is not stored yet (the model and, without a GPU, the CUDA simulator; sweeps that
need a GPU are skipped and the figure says so), and draws the figure from the stored
table, with GPU-measured rows overlaid where they exist.
"""
from __future__ import annotations

import sys

from gpuwrite.cli import UsageError
from gpuwrite.cli.common import console, print_json, table
from gpuwrite.cli.sweep import add_run_options, check_dir, check_dir_name, check_workers, progress_bar


def register(sub) -> None:
    p = sub.add_parser("figures", help="regenerate every figure from stored results (runs missing sweeps)",
                       description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", metavar="NAME",
                   help="only this figure (an experiment file's name, e.g. fig1_latency; repeatable)")
    p.add_argument("--specs", default="experiments", help="directory of experiment files (default experiments)")
    p.add_argument("--out", default="experiments/figures", help="where PNG and PDF files go")
    p.add_argument("--check", action="store_true",
                   help="compute and draw nothing: list the stored tables the code would recompute "
                        "(stale configuration hashes), the GPU tables measured with other code, and "
                        "rows that are not the point their hash names (edited by hand); exit 1 if "
                        "there are any")
    add_run_options(p)
    p.set_defaults(func=main)


def main(args) -> int:
    import time

    from gpuwrite.experiments.render import regenerate
    from gpuwrite.experiments.spec import SpecError

    workers = check_workers(args.workers)   # with --check too: every option given is checked
    check_dir_name(args.results, "--results")
    check_dir_name(args.out, "--out")
    if args.check and args.fresh:           # --check computes nothing: --fresh would be ignored
        raise UsageError("--check with --fresh is not allowed; allowed: --check (report what is "
                         "stale, compute nothing) or --fresh (compute every point again)",
                         value="--check --fresh", allowed="one of --check, --fresh")
    if args.check:                          # which writes nothing and makes no folder
        return check(args)
    figure_specs(args.specs)                # before any folder is made
    check_dir(args.results, "--results")
    check_dir(args.out, "--out")
    started = time.perf_counter()
    try:
        with progress_bar(args.json) as progress:
            made = regenerate(args.specs, args.results, args.out, only=args.only, fresh=args.fresh,
                              workers=workers, progress=progress)
    except SpecError as exc:     # the value and what is allowed, where the error holds them, kept
        raise UsageError(str(exc), value=exc.value, allowed=exc.allowed) from None
    if args.json:
        print_json({"figures": made, "seconds": time.perf_counter() - started})
        return 0
    rows = [[m["figure"], m["rows"], m["gpu_rows"], m["computed"], m["cached"],
             "; ".join(m["skipped"]) or "-", m["seconds"]] for m in made]
    console.print(table("gpuwrite figures", ["what", "rows", "GPU rows", "computed", "cached", "skipped",
                                             "seconds"], rows))
    for m in made:
        console.print(f"{m['figure']}: {', '.join(m['files'])}")
        for line in m["gpu_other_code"]:
            console.print(f"[yellow]warning:[/] {line}", highlight=False, soft_wrap=True)
    return 0


def check(args) -> int:
    """``--check``: the stale parts of the stored regenerable tables, and GPU rows measured
    with other code than this, without computing."""
    from gpuwrite.experiments.sweep import gpu_rows_of_other_code, stale_tables

    specs = figure_specs(args.specs)
    names = sorted(spec.name for spec in specs)
    for name in args.only or ():
        if name not in names:   # as regenerate says it
            raise UsageError(f"figure {name!r} is not allowed; allowed: {', '.join(names)}", value=name,
                             allowed=", ".join(names))
    specs = [spec for spec in specs if not args.only or spec.name in args.only]
    if not check_dir_name(args.results, "--results").is_dir():
        # nothing computed yet is every table missing (status 1, tests/experiments/
        # test_cli_stored.py); a mistyped folder reads so too: say which folder it was
        print(f"gpuwrite figures: note: --results={args.results!r} does not exist, so every table in it "
              "is missing (nothing computed yet, or a mistyped path?)", file=sys.stderr)
    stale = [line for spec in specs for line in stale_tables(spec, args.results)]
    other = [line for spec in specs for line in gpu_rows_of_other_code(spec, args.results)]
    if args.json:
        print_json({"stale": stale, "gpu_other_code": other, "checked": [spec.name for spec in specs]})
    else:
        for line in stale + other:
            console.print(line, highlight=False, soft_wrap=True)
        console.print(f"{len(stale)} stale sweep table(s) and {len(other)} GPU sweep table(s) measured "
                      f"with other code in {len(specs)} experiment file(s)", highlight=False)
    return 1 if stale or other else 0


def figure_specs(folder) -> list:
    """The experiment files of ``--specs`` that name a figure: at least one, or a UsageError
    (an empty name would be the working directory, and a folder without any would draw and
    check nothing, successfully)."""
    from gpuwrite.experiments.spec import find_specs, load_spec

    allowed = "a directory of experiment files with a [figure] table (default experiments)"
    if not str(folder).strip():
        raise UsageError(f"--specs={folder!r} is not allowed; allowed: {allowed}", value=folder, allowed=allowed)
    specs = [spec for spec in (load_spec(path) for path in find_specs(folder)) if spec.figure_kind]
    if not specs:
        raise UsageError(f"--specs={str(folder)!r} is not allowed (it holds no experiment file that names a "
                         f"figure); allowed: {allowed}", value=str(folder), allowed=allowed)
    return specs
