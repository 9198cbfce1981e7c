"""Helpers for the testbed tests (a unique module name: tests/ has several folders).

``compile_reference`` builds a small C module against rdma-core's installed headers
(libibverbs-dev) with cffi, so a test can compare gpuwrite's bytes with what
rdma-core's own definitions produce; it skips when the headers are missing.
"""
import importlib
import os
import shutil
import sys
import tempfile

import pytest

MLX5DV_H = "/usr/include/infiniband/mlx5dv.h"


def compile_reference(module_name: str, cdef: str, source: str, libraries=()):
    if not os.path.exists(MLX5DV_H):
        pytest.skip("rdma-core's mlx5dv.h is not installed (Debian: libibverbs-dev)")
    from cffi import FFI

    ffi = FFI()
    ffi.cdef(cdef)
    ffi.set_source(module_name, source, libraries=list(libraries))
    tmp = tempfile.mkdtemp(prefix="gw-ref-")
    ffi.compile(tmpdir=tmp)
    sys.path.insert(0, tmp)
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path.remove(tmp)
        shutil.rmtree(tmp, ignore_errors=True)   # the loaded .so stays mapped


def mlx5dv_enum_names(prefix: str) -> list[str]:
    """Names of the enum constants in the installed mlx5dv.h that start with ``prefix``."""
    import re

    with open(MLX5DV_H) as header:
        return sorted(set(re.findall(rf"\b({prefix}[A-Z0-9_]+)\s*=", header.read())))
