"""The git commit gpuwrite's code comes from, for the provenance every result carries.

Standard library only: ``setup.py`` loads this file by path while building (before any of
gpuwrite's dependencies exist) to write the commit of the tree being built into the
package (``BUILD_FILE``), so that an installed gpuwrite (``pip install .``, the README's
first command) still says which commit its numbers come from; a checkout asks git.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

DIRTY = "+dirty"     # the suffix of a commit whose tree had uncommitted changes
BUILD_FILE = "_build_commit.txt"


def checkout_commit(root: Path) -> str | None:
    """HEAD of the git checkout at ``root`` (``+dirty`` with uncommitted changes to tracked
    files), or None where ``root`` is no checkout or git cannot say."""
    if not (Path(root) / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + (DIRTY if dirty else "") if head else None


def built_commit(package_dir: Path) -> str | None:
    """The commit written into an installed package when it was built, or None."""
    try:
        text = (Path(package_dir) / BUILD_FILE).read_text().strip()
    except OSError:
        return None
    return text or None
