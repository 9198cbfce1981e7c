"""Every name the package, its scripts and its benchmark scripts use is defined: pyflakes'
undefined-name check over their sources. A name left behind by an edit fails only when its
line runs, and some lines run only on a GPU: session 42 dropped a variable the bench's
verdict still read, and its next run on an H200 ended there after 80 seconds."""
from pathlib import Path

from pyflakes import api, messages, reporter

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("gpuwrite", "scripts", "benchmarks/scripts", "experiments", "csrc/ffi_build.py")


class _Undefined(reporter.Reporter):
    """Keeps pyflakes' undefined-name messages (and files it cannot parse) and nothing else:
    an unused import is a matter of style, a name never defined a failure waiting."""

    def __init__(self):
        self.found: list[str] = []

    def flake(self, message):
        if isinstance(message, (messages.UndefinedName, messages.UndefinedLocal,
                                messages.UndefinedExport)):
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")


def test_every_name_used_is_defined():
    paths = [ROOT / s for s in SOURCES if (ROOT / s).exists()]
    files = [p for path in paths for p in ([path] if path.is_file() else path.rglob("*.py"))]
    assert len(files) > 50
    found = _Undefined()
    for f in files:
        api.checkPath(str(f), found)
    assert found.found == []


def test_the_check_finds_a_name_never_defined(tmp_path):
    """The check itself: a function reading a name nobody defines is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def verdict(lat):\n    return all(x < 1.1 for x in push_ratios)\n")
    found = _Undefined()
    api.checkPath(str(bad), found)
    assert len(found.found) == 1 and "push_ratios" in found.found[0]
