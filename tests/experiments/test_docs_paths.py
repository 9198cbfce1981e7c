"""Every repository path README.md and TESTING.md name in backticks exists.

Reviewers follow the docs literally on a fresh checkout; a file renamed or removed while a
doc still names it sends them nowhere. The check reads every inline code span and fenced
code block, and every relative Markdown link, and takes from them the words that look like
repository paths:

* a word with a ``/`` whose first part is a top-level entry of the repository
  (``csrc/``, ``gpuwrite/``, ``tests/`` ...): it must exist relative to the repository root;
* a bare file name with a known extension (``gw_wqe.c``, ``test_apps.py``): a file of that
  name must exist somewhere in the repository, unless it is one of the few names the docs
  use for files outside it (rdma-core's headers, a command's output file), listed below;
* ``...-session36.json``: some file under ``benchmarks/`` must end that way.

URLs, absolute paths, globs, placeholders (``<device>``, ``FILE``) and options are left
out, as are words whose first part is not in the repository (``remote_access_err/...``,
``sim-out/``)."""
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "TESTING.md")

# Top-level entries a path may start with. Fixed, so that renaming a whole folder still
# fails the check rather than making its paths look foreign.
TOP_LEVEL = {"csrc", "gpuwrite", "experiments", "scripts", "benchmarks", "tests", ".ci",
             "README.md", "TESTING.md", "BENCHMARKS.md", "pyproject.toml", "setup.py",
             "MANIFEST.in"}
EXTENSIONS = (".py", ".c", ".h", ".cu", ".sh", ".toml", ".md", ".json", ".jsonl", ".patch",
              ".parquet", ".png", ".pdf", ".csv", ".supp", ".txt")
# Bare names the docs use for files that are not in the repository: rdma-core's headers
# and scapy classes, and files a shown command writes.
NOT_IN_REPOSITORY = {"mlx5dv.h", "mlx5_ifc.h", "mlx5_prm_structs.py", "runs.parquet",
                     "compare.csv", "my-machine.toml"}
_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist"}


def _code_words(text: str) -> list[tuple[int, str]]:
    """(line, word) for every whitespace-separated word in a code span, fenced block or
    relative link target of ``text``."""
    words = []

    def add(start: int, content: str) -> None:
        line = text.count("\n", 0, start) + 1
        words.extend((line, w) for w in content.split())

    fences = list(re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M))
    for m in fences:
        add(m.start(1), m.group(1))
    rest = text
    for m in reversed(fences):            # blank the fences out, keeping offsets
        rest = rest[:m.start()] + re.sub(r"[^\n]", " ", m.group(0)) + rest[m.end():]
    for m in re.finditer(r"`([^`]+)`", rest):
        add(m.start(1), m.group(1))
    for m in re.finditer(r"\]\(([^)\s]+)\)", rest):
        add(m.start(1), m.group(1).split("#")[0])
    return words


def _repository_names(root: Path) -> set[str]:
    """The names of the files under the repository's top-level folders (not hidden ones,
    which hold scratch copies of the tree)."""
    names = {p.name for p in root.iterdir() if p.is_file()}
    for top in sorted(TOP_LEVEL):
        for dirpath, dirnames, filenames in os.walk(root / top):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS
                           and not d.startswith(".") and not d.endswith(".egg-info")]
            names.update(filenames)
    return names


def missing_paths(text: str, root: Path = ROOT, names: set[str] | None = None) -> list[str]:
    """Every word of ``text``'s code that looks like a repository path and is not there."""
    names = _repository_names(root) if names is None else names
    benchmarks = os.listdir(root / "benchmarks") if (root / "benchmarks").is_dir() else []
    missing = []
    for line, word in _code_words(text):
        word = word.strip("()[],;:'\"").split("::")[0]
        if not word or "://" in word or word.startswith(("/", "~", "$", "-")):
            continue
        if any(c in word for c in "*?<>{}|=") or "FILE" in word:
            continue
        if word.startswith("..."):
            suffix = word[3:]
            if suffix.endswith(EXTENSIONS) and not any(f.endswith(suffix) for f in benchmarks):
                missing.append(f"line {line}: {word} (no benchmarks/ file ends so)")
            continue
        if "/" in word:
            if word.split("/")[0] in TOP_LEVEL and not (root / word).exists():
                missing.append(f"line {line}: {word}")
            continue
        if not word.startswith(".") and word.endswith(EXTENSIONS) \
                and word not in NOT_IN_REPOSITORY and word not in names:
            missing.append(f"line {line}: {word} (no file of that name)")
    return missing


@pytest.mark.parametrize("doc", DOCS)
def test_every_repository_path_the_doc_names_exists(doc):
    missing = missing_paths((ROOT / doc).read_text())
    assert not missing, f"{doc} names paths the repository does not hold:\n" + "\n".join(missing)


def test_the_check_finds_a_renamed_file(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "scripts" / "mutate.py").write_text("")
    (tmp_path / "benchmarks" / "h200-bench-session36.json").write_text("{}")
    text = ("Run `python3 scripts/mutate.py` or `scripts/mutated.py` (see `gw_wqe.c`,\n"
            "`https://example.com/a/b.py`, `experiments/calibration/<device>.toml`,\n"
            "`remote_access_err/rkey_invalidated`, `benchmarks/*.json`, `mutate.py`,\n"
            "`...-session36.json`, `...-session37.json`), [link](scripts/gone.md#x).\n"
            "```bash\npython3 tests/foundation/nothing.py --out runs.parquet\n```\n")
    missing = missing_paths(text, tmp_path)
    assert [m.split(":")[1].split()[0] for m in missing] == [
        "tests/foundation/nothing.py", "scripts/mutated.py", "gw_wqe.c",
        "...-session37.json", "scripts/gone.md"], missing
