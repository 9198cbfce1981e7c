"""A compile cache for gpuwrite's CUDA kernels that no code change can make stale.

Compiling ``send_messages`` takes 30 to 40 s on an H100 host (BENCHMARKS.md, session 19),
and every ``gpuwrite`` command on a GPU compiled it again. numba-cuda can keep compiled
kernels on disk (``cache=True``), but it judges an entry fresh by the kernel's own source
file alone (its mtime and size): a kernel in ``paths/kernels.py`` whose device functions in
``device/verbs.py`` had changed would load the old code, and a benchmark would measure code
that is no longer in the tree. So gpuwrite keeps numba-cuda's cache (its serialised
kernels and its key: the signature, the GPU's compute capability and numba-cuda's version),
names each data file by that key and a stricter stamp, and finds it by name, with no index
(``_Files``). The stamp is a digest of every byte that can reach a kernel, which is

* every Python file of the gpuwrite package (any edit anywhere recompiles: a compile
  cache may be conservative, never stale);
* the C sources the layouts' constants come from (the engine's digest, compiled into the
  extension);
* the Python files beside the kernel's own, where it lives outside the package (the
  applications in ``experiments/apps``).

``GPUWRITE_KERNEL_CACHE`` names the folder (default ``$XDG_CACHE_HOME/gpuwrite/kernels``,
else ``~/.cache/gpuwrite/kernels``), or turns the cache off (``off``, ``0`` or empty). The
simulator compiles nothing and caches nothing. A folder that cannot be written leaves the
kernel uncached (compiled each time, as before), never failed.

numba-cuda has no public hook for a stamp: this subclasses its cache classes
(``numba.cuda.core.caching._CacheLocator``, ``numba.cuda.dispatcher.CUDACache``), as its own
locators do; where a later numba-cuda moves them, kernels are simply not cached.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from gpuwrite.cudaenv import SIMULATOR

ENV = "GPUWRITE_KERNEL_CACHE"
_OFF = ("", "0", "off", "no", "false", "none")
_PACKAGE = Path(__file__).resolve().parent


def cache_root() -> Path | None:
    """The folder kernels are cached under, or None where the cache is off."""
    value = os.environ.get(ENV)
    if value is not None:
        if value.strip().lower() in _OFF:
            return None
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuwrite" / "kernels"


def _digest_files(root: Path, pattern: str) -> str:
    """SHA-256 over the names (relative to ``root``) and bytes of the files matching."""
    digest = hashlib.sha256()
    for file in sorted(root.glob(pattern)):
        digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def _package_stamp() -> str:
    """Digest of the gpuwrite package's Python files and the engine's C sources."""
    try:
        from gpuwrite._gw_cffi import ffi, lib
        engine = ffi.string(lib.gw_csrc_sha256()).decode()
    except (ImportError, AttributeError):   # no engine built: kernels compile all the same
        engine = "no engine"
    return hashlib.sha256(f"{_digest_files(_PACKAGE, '**/*.py')}\0{engine}".encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def code_stamp(py_file: str) -> str:
    """The stamp of a kernel defined in ``py_file``: the package's, and the Python files
    beside ``py_file`` where that lies outside the package."""
    folder = Path(py_file).resolve().parent
    if folder == _PACKAGE or _PACKAGE in folder.parents:
        return _package_stamp()
    beside = _digest_files(folder, "*.py")
    return hashlib.sha256(f"{_package_stamp()}\0{beside}".encode()).hexdigest()


try:
    from numba.cuda.core.caching import IndexDataCacheFile, _CacheLocator
    from numba.cuda.dispatcher import CUDACache, CUDACacheImpl
except ImportError:             # the simulator, or a numba-cuda that moved them
    _CacheLocator = None

# A kernel's data files unused this long (older code's, mostly) are removed when it saves
# a new one.
PRUNE_AFTER_S = 24 * 3600


if _CacheLocator is not None:
    class _Locator(_CacheLocator):
        """numba-cuda's files under ``cache_root()``, stamped with ``code_stamp``."""

        def __init__(self, py_func, py_file, root: Path):
            self._lineno = py_func.__code__.co_firstlineno
            self._path = str(root / self.get_suitable_cache_subpath(py_file))
            self._stamp = code_stamp(py_file)

        def get_cache_path(self):
            return self._path

        def get_source_stamp(self):
            return self._stamp

        def get_disambiguator(self):
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            root = cache_root()
            if root is None or not os.path.isfile(py_file):
                return None
            self = cls(py_func, py_file, root)
            try:
                self.ensure_cache_path()
            except OSError:
                return None
            return self

    class _Files(IndexDataCacheFile):
        """numba-cuda's data files, each named by a digest of its stamp and key and found
        by that name alone: no index.

        numba numbers data files 1, 2, ... and finds them through an index written
        beside them, so while several processes compile at once (pytest's workers) one
        could read an index entry whose number still held another key's kernel, or the
        old code's: a wrong kernel, silently. A file named by its stamp and key holds that
        key's kernel or does not exist (it is written whole, then renamed into place), and
        code that changes back (an A/B of two versions) finds its kernels again."""

        def _keyed_name(self, key) -> str:
            digest = hashlib.sha256(repr((self._source_stamp, key)).encode()).hexdigest()
            return self._data_name_pattern.replace("{number:d}", digest[:24])

        def save(self, key, data):
            # The key goes in with the data: a name is a digest of the key's text, and two
            # keys whose text is the same (types that print alike) must not share a kernel.
            self._save_data(self._keyed_name(key), (self._source_stamp, key, data))
            self._prune()

        def load(self, key):
            path = Path(self._data_path(self._keyed_name(key)))
            try:
                stamp, saved_key, data = self._load_data(path.name)
                os.utime(path)          # in use: not pruned
            except (OSError, ValueError, TypeError):    # not cached, removed, or not ours
                return None
            return data if (stamp, saved_key) == (self._source_stamp, key) else None

        def _prune(self) -> None:
            import time

            pattern = self._data_name_pattern.replace("{number:d}", "*")
            for file in Path(self._cache_path).glob(pattern):
                try:
                    if time.time() - file.stat().st_mtime > PRUNE_AFTER_S:
                        file.unlink()
                except OSError:
                    pass

    class _Impl(CUDACacheImpl):
        _locator_classes = [_Locator]

    class _Cache(CUDACache):
        _impl_class = _Impl

        def __init__(self, py_func):
            super().__init__(py_func)
            self._cache_file = _Files(cache_path=self._cache_path,
                                      filename_base=self._impl.filename_base,
                                      source_stamp=self._impl.locator.get_source_stamp())


def cached(kernel):
    """Decorator for a ``@cuda.jit`` kernel: its compiled code is kept on disk under
    ``cache_root()`` with the stamp above. A no-op on the simulator, with the cache off,
    or where the folder cannot be written."""
    if SIMULATOR or _CacheLocator is None or cache_root() is None:
        return kernel
    try:
        kernel._cache = _Cache(kernel.py_func)
    except (RuntimeError, OSError):     # RuntimeError: numba found no locator (no folder)
        pass
    return kernel


def describe() -> str:
    """Where kernels are cached, for doctor and the docs."""
    root = cache_root()
    if SIMULATOR:
        return "off (the CUDA simulator compiles nothing)"
    if root is None:
        return f"off ({ENV}={os.environ.get(ENV)!r})"
    return f"{root} (set {ENV}=off to compile every time)"
