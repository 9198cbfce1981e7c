"""cffi build of gpuwrite's C side (API mode): the layouts header and the NIC engine.

setuptools runs this through ``cffi_modules`` at install time; it can also be run
directly (``python csrc/ffi_build.py``) to build the extension in place.
"""
from pathlib import Path

from cffi import FFI

CSRC = Path(__file__).resolve().parent
HEADERS = ("gw_layouts.h", "gw_engine.h")


def cdef_text() -> str:
    """The headers as cffi's cdef reads them: the same text the C compiler sees."""
    return "\n".join((CSRC / name).read_text() for name in HEADERS)


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "gpuwrite._gw_cffi",
    "#include <stdint.h>\n#include <stddef.h>\n"
    + "".join(f'#include "{name}"\n' for name in HEADERS),
    sources=["csrc/gw_engine.c"],   # relative: setuptools builds from the project root
    include_dirs=["csrc"],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function", "-D_FORTIFY_SOURCE=2"],
    libraries=["dl", "pthread"],
)

if __name__ == "__main__":
    import os

    os.chdir(CSRC.parent)
    ffibuilder.compile(tmpdir=".", verbose=False)
