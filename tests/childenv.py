"""The environment of a Python process a test starts (pyproject puts tests/ on the path).

The child imports the gpuwrite this test process imported: with ``-P``, a checkout in the
working directory (without the compiled extension) cannot shadow an installed copy. What
PYTHONPATH already held comes after it (the GPU machines carry wheels there).
"""
import os
from pathlib import Path

import gpuwrite

GPUWRITE_HOME = str(Path(gpuwrite.__file__).resolve().parents[1])


def child_env(*extra_paths, **env) -> dict:
    """os.environ with ``env`` set and PYTHONPATH = gpuwrite's home, ``extra_paths``, then
    the PYTHONPATH this process had."""
    parts = [GPUWRITE_HOME, *map(str, extra_paths), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, **env, "PYTHONPATH": os.pathsep.join(p for p in parts if p)}
