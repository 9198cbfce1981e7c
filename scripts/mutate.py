#!/usr/bin/env python3
"""Mutation testing for gpuwrite: does the test suite catch the bugs that matter?

Applies each mutation of a curated list (``scripts/mutations.toml``) to a copy of the
tree, one at a time, rebuilds the cffi extension when a C file or header changed, runs
the tests the mutation names (``pytest -x -q`` under a time limit) and reports each
mutation as

* ``killed``    a selected test failed (the first failing test's node id is kept), or
                the run hit its time limit (a hang is caught too);
* ``survived``  every selected test passed with the bug in place: a gap in the tests
                (close it, or explain it in TESTING.md);
* ``equivalent`` survived, as its entry's ``equivalent`` note says it must: a change no
                test can see (the note says why). Not counted in the score; should such
                a mutant ever be killed, it is reported as ``killed`` and the note is wrong;
* ``not-applicable``  the text to find does not occur exactly once in the file: the
                list is out of date with the code. Reported loudly, exit status 2;
* ``invalid``   the mutant does not build, or the unmutated tree already fails the
                selection (the baseline): fix the entry.

The working tree is never modified: each worker copies the tree (``git ls-files``: what
is tracked and what is new but not ignored, plus the built extension) into a temporary
folder, and restores each mutated file (and the extension) after its run.

Why a hand-written harness rather than mutmut: the code that matters most here is C
compiled by cffi (the NIC engine) and Numba device functions (the device verbs), which
mutmut cannot mutate (C) or whose trampolines Numba cannot compile (device code); and
the list is curated: each entry stands for a bug that could really be written (an
off-by-one in the overflow check, a dropped owner-bit test, a missing byte swap), names
the few tests that should catch it, and so runs in seconds rather than mutating every
operator of every file against the whole suite. Random operator mutation of the pure
Python parts (the model's formulas) is a good complement: ``mutmut run`` with
``paths_to_mutate = ["gpuwrite/model/"]`` and ``tests/model`` as the runner's tests.

Usage::

    python3 scripts/mutate.py                    # the whole list, one at a time
    python3 scripts/mutate.py --only 'engine-*'  # ids matching a glob (repeatable)
    python3 scripts/mutate.py --file csrc/gw_engine.c -j 2
    python3 scripts/mutate.py --json out.json --markdown out.md
    python3 scripts/mutate.py --list             # the entries, without running them

Grow the list whenever a bug is found: add the mutation that reintroduces it, with the
test that now catches it (TESTING.md).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import fnmatch
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIST = ROOT / "scripts" / "mutations.toml"
BUILD_INPUTS = (".c", ".h")
EXTENSION_GLOB = "gpuwrite/_gw_cffi*.so"
DEFAULT_TIMEOUT_S = 120


class ListError(ValueError):
    """The mutation list is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Mutation:
    """One deliberate bug: replace ``find`` (which must occur exactly once in ``file``)
    by ``replace``; ``tests`` (pytest node ids or paths) should fail with it in place."""

    id: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    bug: str
    timeout_s: int = DEFAULT_TIMEOUT_S
    equivalent: str = ""          # why no test can tell this mutant apart, if none can

    @property
    def needs_build(self) -> bool:
        return self.file.endswith(BUILD_INPUTS)


@dataclass
class Outcome:
    id: str
    file: str
    bug: str
    status: str                   # killed / survived / equivalent / not-applicable / invalid
    detail: str = ""              # the killing test, or why not applicable / invalid
    seconds: float = 0.0
    tests: list[str] = field(default_factory=list)


def load(path: Path) -> list[Mutation]:
    """The mutation list at ``path``, checked: unique ids, every field present."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    entries = data.get("mutation")
    if not isinstance(entries, list) or not entries:
        raise ListError(f"{path}: no [[mutation]] entries")
    out, seen = [], set()
    for n, e in enumerate(entries, 1):
        where = f"{path.name}, entry {n} ({e.get('id', 'no id')})"
        for key in ("id", "file", "find", "replace", "tests", "bug"):
            if key not in e:
                raise ListError(f"{where}: missing {key!r}")
        if e["id"] in seen:
            raise ListError(f"{where}: id {e['id']!r} is used twice")
        if e["find"] == e["replace"]:
            raise ListError(f"{where}: replace is the same text as find")
        tests = e["tests"]
        if isinstance(tests, str):
            tests = [tests]
        if not tests or not all(isinstance(t, str) and t for t in tests):
            raise ListError(f"{where}: tests must name at least one test (node id or path)")
        timeout_s = int(e.get("timeout_s", DEFAULT_TIMEOUT_S))
        if not 1 <= timeout_s <= 3600:
            raise ListError(f"{where}: timeout_s={timeout_s}: allowed 1 to 3600")
        unknown = set(e) - {"id", "file", "find", "replace", "tests", "bug", "timeout_s",
                            "equivalent"}
        if unknown:
            raise ListError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        seen.add(e["id"])
        out.append(Mutation(e["id"], e["file"], e["find"], e["replace"], tuple(tests),
                            e["bug"], timeout_s, e.get("equivalent", "")))
    return out


def applicable(m: Mutation, root: Path = ROOT) -> str:
    """Empty if ``m`` applies to the tree at ``root``, else why not."""
    path = root / m.file
    if not path.is_file():
        return f"{m.file} does not exist"
    count = path.read_text().count(m.find)
    if count != 1:
        return f"the text to find occurs {count} times in {m.file} (must be exactly once)"
    return ""


def tree_files(root: Path) -> list[str]:
    """Files of the working tree: tracked, and new files git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and (root / p).is_file()]


class Workspace:
    """A private copy of the tree in which mutations are applied and undone."""

    def __init__(self, root: Path):
        self.dir = Path(tempfile.mkdtemp(prefix="gw-mutate-"))
        for rel in tree_files(root):
            dst = self.dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dst)
        built = sorted(root.glob(EXTENSION_GLOB))
        if built:
            for so in built:
                shutil.copy2(so, self.dir / so.relative_to(root))
        else:
            err = self.build()
            if err:
                raise RuntimeError(f"the unmutated tree does not build:\n{err}")
        self.extensions = {so: so.read_bytes() for so in self.dir.glob(EXTENSION_GLOB)}
        where = subprocess.run([sys.executable, "-c", "import gpuwrite; print(gpuwrite.__file__)"],
                               cwd=self.dir, capture_output=True, text=True, env=self.env())
        if not where.stdout.strip().startswith(str(self.dir)):
            raise RuntimeError(f"the copy in {self.dir} imports gpuwrite from "
                               f"{where.stdout.strip() or where.stderr.strip()}, not from itself")

    @staticmethod
    def env() -> dict:
        env = dict(os.environ)
        env["PYTHONDONTWRITEBYTECODE"] = "1"    # no stale .pyc across mutants
        return env

    def build(self) -> str:
        """Rebuilds the extension from scratch; returns the compiler's output on failure."""
        for stale in list(self.dir.glob(EXTENSION_GLOB)) + list(self.dir.rglob("*.o")):
            stale.unlink()
        r = subprocess.run([sys.executable, "csrc/ffi_build.py"], cwd=self.dir,
                           capture_output=True, text=True, env=self.env())
        return "" if r.returncode == 0 and any(self.dir.glob(EXTENSION_GLOB)) else \
            (r.stdout + r.stderr)[-3000:]

    def restore_extension(self) -> None:
        for so in list(self.dir.glob(EXTENSION_GLOB)):
            so.unlink()
        for so, data in self.extensions.items():
            so.write_bytes(data)

    def pytest(self, tests, timeout_s: int) -> tuple[int | None, str]:
        """Runs pytest on ``tests``; (exit status or None on time-out, output)."""
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider",
               "--no-header", *tests]
        try:
            r = subprocess.run(cmd, cwd=self.dir, capture_output=True, text=True,
                               timeout=timeout_s, env=self.env())
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return None, out
        return r.returncode, r.stdout + r.stderr

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


_FAILED = re.compile(r"^(FAILED|ERROR) (\S+)", re.M)


def first_failure(output: str) -> str:
    m = _FAILED.search(output)
    if m:
        return m.group(2)
    tail = [line for line in output.strip().splitlines() if line.strip()]
    return tail[-1][:200] if tail else "no output"


def run_one(ws: Workspace, m: Mutation, baseline: dict) -> Outcome:
    start = time.monotonic()
    out = Outcome(m.id, m.file, m.bug, "invalid", tests=list(m.tests))
    why = applicable(m, ws.dir)
    if why:
        out.status, out.detail = "not-applicable", why
        return out
    key = tuple(m.tests)
    if key in baseline and baseline[key]:
        out.detail = f"the unmutated tree fails this selection: {baseline[key]}"
        return out
    path = ws.dir / m.file
    original = path.read_text()
    try:
        path.write_text(original.replace(m.find, m.replace, 1))
        if m.needs_build:
            err = ws.build()
            if err:
                out.detail = "the mutant does not build: " + err.strip().splitlines()[-1][:300]
                return out
        rc, log = ws.pytest(m.tests, m.timeout_s)
        if rc is None:
            out.status, out.detail = "killed", f"time limit of {m.timeout_s} s (a hang)"
        elif rc == 0:
            out.status = "equivalent" if m.equivalent else "survived"
            out.detail = m.equivalent
        elif rc == 5:
            out.detail = "the selection collected no tests"
        else:
            out.status, out.detail = "killed", first_failure(log)
    finally:
        path.write_text(original)
        if m.needs_build:
            ws.restore_extension()
        out.seconds = round(time.monotonic() - start, 1)
    return out


def run_all(mutations: list[Mutation], jobs: int, check_baseline: bool, report) -> list[Outcome]:
    pool: queue.Queue[Workspace] = queue.Queue()
    spaces = [Workspace(ROOT) for _ in range(jobs)]
    for ws in spaces:
        pool.put(ws)
    baseline: dict[tuple, str] = {}
    try:
        if check_baseline:
            selections = sorted({tuple(m.tests) for m in mutations if not applicable(m)})

            def base(sel):
                ws = pool.get()
                try:
                    rc, log = ws.pytest(sel, max(m.timeout_s for m in mutations
                                                 if tuple(m.tests) == sel))
                finally:
                    pool.put(ws)
                return sel, "" if rc == 0 else (f"rc={rc}: " + first_failure(log))

            with cf.ThreadPoolExecutor(jobs) as ex:
                for sel, err in ex.map(base, selections):
                    baseline[sel] = err
                    if err:
                        print(f"baseline FAILS for {' '.join(sel)}: {err}", file=sys.stderr)

        def one(m):
            ws = pool.get()
            try:
                return run_one(ws, m, baseline)
            finally:
                pool.put(ws)

        results = []
        with cf.ThreadPoolExecutor(jobs) as ex:
            for o in ex.map(one, mutations):
                report(o)
                results.append(o)
        return results
    finally:
        for ws in spaces:
            ws.remove()


def score(results: list[Outcome]) -> tuple[int, int, float]:
    killed = sum(o.status == "killed" for o in results)
    judged = killed + sum(o.status == "survived" for o in results)
    return killed, judged, (100.0 * killed / judged if judged else 0.0)


def markdown(results: list[Outcome]) -> str:
    killed, judged, pct = score(results)
    lines = [f"**{killed} of {judged} mutants killed ({pct:.1f}%)**", "",
             "| id | file | status | killed by / detail | s |", "| --- | --- | --- | --- | --- |"]
    for o in results:
        detail = o.detail.replace("|", "\\|")
        lines.append(f"| {o.id} | {o.file} | {o.status} | {detail} | {o.seconds} |")
    survivors = [o for o in results if o.status == "survived"]
    if survivors:
        lines += ["", "Survivors:"] + [f"- `{o.id}`: {o.bug}" for o in survivors]
    equivalent = [o for o in results if o.status == "equivalent"]
    if equivalent:
        lines += ["", "Equivalent (not scored):"] + [f"- `{o.id}`: {o.detail}" for o in equivalent]
    return "\n".join(lines) + "\n"


def select(mutations: list[Mutation], only: list[str], file: str | None) -> list[Mutation]:
    out = [m for m in mutations if not only or any(fnmatch.fnmatchcase(m.id, g) for g in only)]
    if file:
        out = [m for m in out if m.file == file]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list-file", type=Path, default=DEFAULT_LIST,
                    help="the mutation list (default: scripts/mutations.toml)")
    ap.add_argument("--only", action="append", default=[], metavar="ID",
                    help="run the mutations whose id matches this glob (repeatable)")
    ap.add_argument("--file", help="run only the mutations of this file (repository path)")
    ap.add_argument("-j", "--jobs", type=int, default=1,
                    help="mutants run at once, each in its own copy of the tree (default 1)")
    ap.add_argument("--json", type=Path, help="write every outcome to this JSON file")
    ap.add_argument("--markdown", type=Path, help="write a markdown summary to this file")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip running each selection on the unmutated tree first")
    ap.add_argument("--list", action="store_true", help="print the entries and exit")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"-j {args.jobs}: must be at least 1")
    try:
        mutations = load(args.list_file)
    except (ListError, tomllib.TOMLDecodeError, OSError) as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2
    chosen = select(mutations, args.only, args.file)
    if not chosen:
        print(f"mutate: no mutation matches --only {args.only} --file {args.file}", file=sys.stderr)
        return 2
    stale = [(m, applicable(m)) for m in chosen if applicable(m)]
    for m, why in stale:
        print(f"NOT APPLICABLE {m.id}: {why}; update scripts/mutations.toml", file=sys.stderr)
    if args.list:
        for m in chosen:
            print(f"{m.id:36s} {m.file:32s} {' '.join(m.tests)}")
        return 2 if stale else 0

    width = max(len(m.id) for m in chosen)

    def report(o: Outcome) -> None:
        print(f"{o.id:{width}s}  {o.status:14s} {o.seconds:6.1f}s  {o.detail}", flush=True)

    results = run_all(chosen, args.jobs, not args.no_baseline, report)
    killed, judged, pct = score(results)
    print(f"\n{killed} of {judged} mutants killed ({pct:.1f}%)")
    for o in results:
        if o.status in ("survived", "not-applicable", "invalid"):
            print(f"  {o.status}: {o.id} ({o.bug})")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in results], indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(results))
    if any(o.status in ("not-applicable", "invalid") for o in results):
        return 2
    return 0 if all(o.status in ("killed", "equivalent") for o in results) else 1


if __name__ == "__main__":
    sys.exit(main())
