"""Importing pyverbs (rdma-core's Python bindings) where it is installed.

pyverbs is not on PyPI. rdma-core builds it for one interpreter; Debian and Ubuntu ship
it as ``python3-pyverbs`` for the system Python, under ``/usr/lib/python3/dist-packages``.
An interpreter of the same version and ABI (e.g. a pyenv 3.11 beside Debian 12's 3.11)
can load that copy: ``import_pyverbs`` does so without putting the rest of
dist-packages on ``sys.path``.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

SYSTEM_PYVERBS = Path("/usr/lib/python3/dist-packages/pyverbs")


class PyverbsMissing(ImportError):
    """pyverbs cannot be imported here; the message says what was tried."""


def import_pyverbs():
    """The ``pyverbs`` package, from this interpreter's path or the system's copy."""
    try:
        import pyverbs
        return pyverbs
    except ImportError as exc:
        first = exc
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]     # .cpython-311-x86_64-linux-gnu.so
    if not (SYSTEM_PYVERBS / "__init__.py").exists():
        raise PyverbsMissing(f"pyverbs is not importable ({first}) and {SYSTEM_PYVERBS} does not "
                             "exist: install rdma-core's pyverbs (Debian/Ubuntu: python3-pyverbs)")
    if not any(SYSTEM_PYVERBS.glob(f"*{suffix}")):
        raise PyverbsMissing(f"pyverbs is not importable ({first}); the system copy in "
                             f"{SYSTEM_PYVERBS} is built for another Python (no *{suffix} modules)")
    spec = importlib.util.spec_from_file_location(
        "pyverbs", SYSTEM_PYVERBS / "__init__.py", submodule_search_locations=[str(SYSTEM_PYVERBS)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["pyverbs"] = module
    try:
        spec.loader.exec_module(module)
        importlib.import_module("pyverbs.device")
    except ImportError as exc:
        for name in [n for n in sys.modules if n == "pyverbs" or n.startswith("pyverbs.")]:
            del sys.modules[name]
        raise PyverbsMissing(f"the system pyverbs in {SYSTEM_PYVERBS} does not load here: {exc}") from None
    return module
