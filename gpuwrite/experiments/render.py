"""``regenerate``: every figure from stored results, running the sweeps that are missing first."""
from __future__ import annotations

import time
from pathlib import Path

from gpuwrite.experiments import store
from gpuwrite.experiments.figures import FIGURES, gpu_rows
from gpuwrite.experiments.spec import ExperimentSpec, SpecError, find_specs, load_spec
from gpuwrite.experiments.style import DPI
from gpuwrite.experiments.sweep import Pool, gpu_rows_of_other_code, run_spec

DEFAULT_SPECS = Path("experiments")
DEFAULT_FIGURES = Path("experiments") / "figures"
FORMATS = ("png", "pdf")


def save(fig, out_dir: Path, name: str) -> list[Path]:
    """PNG and PDF of a figure; no timestamps inside, so unchanged figures give unchanged files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in FORMATS:
        path = out_dir / f"{name}.{fmt}"
        metadata = {"CreationDate": None} if fmt == "pdf" else {}
        # tight: keep the caveat printed under the axes (style.caveat) on the page
        fig.savefig(path, dpi=DPI, metadata=metadata, bbox_inches="tight", pad_inches=0.05)
        paths.append(path)
    return paths


def draw(spec: ExperimentSpec, results_dir: Path, other_code: list[str] | None = None):
    """The figure of ``spec`` from its stored table, and that table. Where its GPU rows
    were measured with other code than this checkout's (``other_code``, the lines of
    ``gpu_rows_of_other_code``, found here where not given: a CPU-only machine can change
    the code but cannot measure again), the figure says so under its axes, with the
    commits the rows name."""
    table = store.load_results(results_dir, spec.name)
    try:
        fig = FIGURES[spec.figure_kind](table)
    except (KeyError, ValueError, IndexError) as exc:
        # a file of one's own naming a kind whose columns its sweeps do not make (no
        # topology for latency_vs_size): pandas' or matplotlib's traceback, not the file
        what = f"no column {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else \
            f"{type(exc).__name__}: {exc}"
        raise SpecError(f"{spec.path}: figure.kind={spec.figure_kind!r} is not allowed for this file's "
                        f"sweeps (drawing it from their table of {len(table)} rows failed: {what}); allowed: "
                        "a kind whose columns the sweeps make, as in the experiment file of that kind "
                        "under experiments/") from exc
    if spec.title:
        fig.suptitle(spec.title, fontsize=10)
    if other_code is None:
        other_code = gpu_rows_of_other_code(spec, results_dir)
    if other_code:
        measured = gpu_rows(table)
        commits = sorted({str(c)[:12] for c in measured.get("git_commit", []) if c == c and c})
        fig.text(0.01, -0.01, "GPU rows measured with other code than this checkout's (commit "
                 f"{', '.join(commits) or 'unknown'}): rerun scripts/gpu_experiments.sh on a GPU "
                 "(gpuwrite figures --check lists them)", ha="left", va="top", fontsize=7,
                 color="firebrick", gid="gpu-other-code")
    return fig, table


def regenerate(spec_dir: str | Path = DEFAULT_SPECS, results_dir: str | Path = store.DEFAULT_RESULTS,
               out_dir: str | Path = DEFAULT_FIGURES, *, only: list[str] | None = None, fresh: bool = False,
               workers: int | None = None, progress=None) -> list[dict]:
    """Runs what is missing of every figure's sweeps, then draws each figure into ``out_dir``."""
    specs = [load_spec(path) for path in find_specs(spec_dir)]
    specs = [spec for spec in specs if spec.figure_kind]
    if only:
        names = {spec.name for spec in specs}
        for name in only:
            if name not in names:
                raise SpecError(f"figure {name!r} is not allowed; allowed: {', '.join(sorted(names))}")
        specs = [spec for spec in specs if spec.name in only]
    out = []
    with Pool(workers) as pool:
        for spec in specs:
            started = time.perf_counter()
            ran = run_spec(spec, results_dir, fresh=fresh, pool=pool, progress=progress)
            # GPU rows this checkout's code would not make: the figure and the report say so
            other_code = gpu_rows_of_other_code(spec, Path(results_dir))
            fig, table = draw(spec, Path(results_dir), other_code)
            files = save(fig, Path(out_dir), spec.name)
            out.append({
                "figure": spec.name, "kind": spec.figure_kind, "title": spec.title,
                "files": [str(f) for f in files], "rows": len(table), "gpu_rows": len(gpu_rows(table)),
                "computed": sum(r.computed for r in ran["reports"]),
                "cached": sum(r.cached for r in ran["reports"]),
                "skipped": [f"{r.sweep}: {r.skipped}" for r in ran["reports"] if r.skipped],
                "gpu_other_code": other_code,
                "seconds": time.perf_counter() - started,
            })
    return out
