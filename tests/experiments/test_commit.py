"""Which commit a result says it came from: a checkout's HEAD, or for an installed package
the commit setup.py wrote into it when it was built (gpuwrite/_commit.py)."""
import shutil
import subprocess
from pathlib import Path

import pytest

import gpuwrite
from gpuwrite import _commit
from gpuwrite.experiments import store

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="no git on this machine")


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin:/usr/local/bin",
                        "HOME": str(root)})


@needs_git
def test_a_checkout_gives_its_head_and_says_when_it_is_dirty(tmp_path):
    assert _commit.checkout_commit(tmp_path) is None            # no checkout here
    _git(tmp_path, "init", "-q")
    (tmp_path / "f.txt").write_text("a\n")
    _git(tmp_path, "add", "f.txt")
    _git(tmp_path, "commit", "-q", "-m", "first")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert _commit.checkout_commit(tmp_path) == head
    (tmp_path / "f.txt").write_text("b\n")
    assert _commit.checkout_commit(tmp_path) == head + _commit.DIRTY
    (tmp_path / "new.txt").write_text("untracked files do not make it dirty\n")
    (tmp_path / "f.txt").write_text("a\n")
    assert _commit.checkout_commit(tmp_path) == head


def test_an_installed_package_reads_the_commit_it_was_built_from(tmp_path):
    assert _commit.built_commit(tmp_path) is None                # built from no checkout
    (tmp_path / _commit.BUILD_FILE).write_text("")
    assert _commit.built_commit(tmp_path) is None
    (tmp_path / _commit.BUILD_FILE).write_text("ab" * 20 + "+dirty\n")
    assert _commit.built_commit(tmp_path) == "ab" * 20 + "+dirty"


def test_git_commit_is_the_checkouts_or_else_the_built_one(monkeypatch):
    """Whichever way this gpuwrite was installed (CI installs the package, `python3 -P`
    keeps the checkout off the path), git_commit() names what the code came from."""
    monkeypatch.delenv("GPUWRITE_GIT_COMMIT", raising=False)
    store.git_commit.cache_clear()
    try:
        package = Path(gpuwrite.__file__).resolve().parent
        if (package.parent / ".git").exists():
            want = _commit.checkout_commit(package.parent)
        else:
            want = _commit.built_commit(package)
        assert store.git_commit() == want
        monkeypatch.setenv("GPUWRITE_GIT_COMMIT", "c" * 40)
        store.git_commit.cache_clear()
        assert store.git_commit() == "c" * 40
    finally:
        store.git_commit.cache_clear()
