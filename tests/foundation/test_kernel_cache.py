"""The kernel compile cache (gpuwrite/kernel_cache.py): an entry is loaded only where every
file that can reach the kernel is as it was, and never holds another key's kernel."""
import subprocess
import sys
import textwrap

import pytest
from childenv import child_env

from gpuwrite import kernel_cache
from gpuwrite.cudaenv import SIMULATOR


@pytest.mark.parametrize("value, expected", [("off", None), ("0", None), ("", None), (" OFF ", None),
                                             ("/tmp/kc", "/tmp/kc")])
def test_the_folder_is_the_variable_or_off(monkeypatch, value, expected):
    monkeypatch.setenv(kernel_cache.ENV, value)
    root = kernel_cache.cache_root()
    assert (None if root is None else str(root)) == expected


def test_the_default_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv(kernel_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernel_cache.cache_root() == tmp_path / "gpuwrite" / "kernels"


def test_a_stamp_changes_with_any_file_beside_the_kernel(tmp_path):
    (tmp_path / "k.py").write_text("x = 1\n")
    (tmp_path / "helper.py").write_text("y = 2\n")
    before = kernel_cache._digest_files(tmp_path, "*.py")
    (tmp_path / "helper.py").write_text("y = 3\n")
    after = kernel_cache._digest_files(tmp_path, "*.py")
    (tmp_path / "new.py").write_text("")
    assert len({before, after, kernel_cache._digest_files(tmp_path, "*.py")}) == 3
    # a kernel outside the package: the package's stamp and its folder's files
    assert kernel_cache.code_stamp(str(tmp_path / "k.py")) != kernel_cache._package_stamp()
    assert kernel_cache.code_stamp(kernel_cache.__file__) == kernel_cache._package_stamp()


def test_cached_leaves_a_kernel_alone_where_nothing_is_cached(monkeypatch):
    monkeypatch.setenv(kernel_cache.ENV, "off")
    marker = object()
    assert kernel_cache.cached(marker) is marker
    assert "off" in kernel_cache.describe()


# numba-cuda's cache classes exist only with the simulator off; the files' logic needs no
# GPU (a driver is needed to compile, not to save or load).
_FILES_SCRIPT = r"""
import os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
from gpuwrite import kernel_cache as kc
if kc._CacheLocator is None:
    print("SKIP"); sys.exit(0)
folder = sys.argv[1]
a = kc._Files(folder, "f-1.py311", "stamp A")
a.save(("sig", 1), {"kernel": "one"})
a.save(("sig", 2), {"kernel": "two"})
assert a.load(("sig", 1)) == {"kernel": "one"} and a.load(("sig", 2)) == {"kernel": "two"}
assert a.load(("sig", 3)) is None
# the code changed: the same key under another stamp finds nothing, and saving it keeps
# the old code's file apart (another process may still run the old code)
b = kc._Files(folder, "f-1.py311", "stamp B")
assert b.load(("sig", 1)) is None
b.save(("sig", 1), {"kernel": "one, new code"})
assert b.load(("sig", 1)) == {"kernel": "one, new code"}
assert a.load(("sig", 1)) == {"kernel": "one"}      # and the old code finds its own again
# another kernel of the same name base in another file of the folder: apart
c = kc._Files(folder, "g-1.py311", "stamp A")
assert c.load(("sig", 1)) is None
# a file's name is all a load looks for: an index (numba's, or a stale one) changes nothing
a._save_index({("sig", 3): a._keyed_name(("sig", 1))})
assert a.load(("sig", 3)) is None
# and the key saved with the data must be the key asked for: two keys whose names collide
# (types that print alike) never share a kernel
class Alike:
    def __init__(self, v): self.v = v
    def __repr__(self): return "Alike"
    def __eq__(self, other): return isinstance(other, Alike) and other.v == self.v
    def __hash__(self): return hash(self.v)
a.save(("sig", Alike(1)), {"kernel": "alike one"})
assert a._keyed_name(("sig", Alike(1))) == a._keyed_name(("sig", Alike(2)))
assert a.load(("sig", Alike(2))) is None and a.load(("sig", Alike(1))) == {"kernel": "alike one"}
# files unused for a day are pruned when a kernel is saved, never younger ones
old = os.path.join(folder, a._keyed_name(("sig", 2)))
os.utime(old, (0, 0))
b.save(("sig", 2), {"kernel": "two, new code"})
assert not os.path.exists(old)
assert os.path.exists(os.path.join(folder, a._keyed_name(("sig", 1))))
# loading marks a file used
used = os.path.join(folder, b._keyed_name(("sig", 1)))
os.utime(used, (0, 0))
assert b.load(("sig", 1)) is not None and os.stat(used).st_mtime > 1e9
print("OK")
"""


def test_the_files_hold_only_their_own_key_and_stamp(tmp_path):
    p = subprocess.run([sys.executable, "-P", "-c", _FILES_SCRIPT, str(tmp_path)], capture_output=True,
                       text=True, env=child_env(NUMBA_ENABLE_CUDASIM="0"), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    if p.stdout.strip() == "SKIP":
        pytest.skip("numba-cuda's cache classes are not where kernel_cache looks")
    assert p.stdout.strip() == "OK"


_KERNEL = textwrap.dedent("""
    from gpuwrite.cudaenv import cuda
    from gpuwrite.kernel_cache import cached
    from helper import VALUE

    @cached
    @cuda.jit
    def fill(out):
        out[cuda.threadIdx.x] = VALUE
    """)

_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from k import fill
    out = np.zeros(32, np.int64)
    fill[1, 32](out)
    print(int(out.min()), int(out.max()), sum(fill._cache_hits.values()), sum(fill._cache_misses.values()))
    """)


@pytest.mark.skipif(SIMULATOR, reason="the simulator compiles nothing: a real GPU only")
def test_a_kernel_is_loaded_from_the_cache_until_a_file_it_reads_changes(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "k.py").write_text(_KERNEL)
    (code / "helper.py").write_text("VALUE = 7\n")

    def run():
        p = subprocess.run([sys.executable, "-P", "-c", _RUN, str(code)], capture_output=True, text=True,
                           env=child_env(GPUWRITE_KERNEL_CACHE=str(tmp_path / "cache")), timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        return tuple(map(int, p.stdout.split()[-4:]))

    assert run() == (7, 7, 0, 1)        # compiled
    assert run() == (7, 7, 1, 0)        # loaded
    # the kernel's own file is unchanged; the module it reads a constant from is not
    (code / "helper.py").write_text("VALUE = 9\n")
    assert run() == (9, 9, 0, 1)        # compiled again, with the new value
    assert run() == (9, 9, 1, 0)


def test_doctor_says_when_the_folder_cannot_be_written(monkeypatch, tmp_path):
    from gpuwrite import doctor

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(kernel_cache.ENV, str(blocker / "kernels"))     # under a file: no folder
    assert "cannot be written" in doctor.kernel_cache_state(simulator=False)
    monkeypatch.setenv(kernel_cache.ENV, str(tmp_path / "kernels" / "deeper"))
    assert doctor.kernel_cache_state(simulator=False).startswith(str(tmp_path / "kernels" / "deeper"))
    assert not (tmp_path / "kernels").exists()          # a diagnosis makes no folder
    monkeypatch.setenv(kernel_cache.ENV, "off")
    assert "off" in doctor.kernel_cache_state(simulator=False)
