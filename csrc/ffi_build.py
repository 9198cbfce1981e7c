"""cffi build of gpuwrite's C side (API mode): the layouts header and the NIC engine.

setuptools runs this through ``cffi_modules`` at install time; it can also be run
directly (``python csrc/ffi_build.py``) to build the extension in place.

The extension carries the SHA-256 of the C sources it was compiled from
(``lib.gw_csrc_sha256()``): the emulated backend's code fingerprint
(``gpuwrite.experiments.spec``) includes it, so cached emulated results are keyed by the
engine that produced them, the same in a checkout and in an installed package (which has
no csrc/ to read).
"""
import hashlib
from pathlib import Path

from cffi import FFI

CSRC = Path(__file__).resolve().parent
HEADERS = ("gw_layouts.h", "gw_engine.h")


def cdef_text() -> str:
    """The headers as cffi's cdef reads them: the same text the C compiler sees."""
    return "\n".join((CSRC / name).read_text() for name in HEADERS)


def source_files() -> list[Path]:
    """Every C source and header of the engine, in a fixed order."""
    return sorted([*CSRC.glob("*.c"), *CSRC.glob("*.h")])


def csrc_sha256() -> str:
    """SHA-256 over the names (csrc/NAME) and contents of ``source_files()``."""
    digest = hashlib.sha256()
    for file in source_files():
        digest.update(f"csrc/{file.name}".encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


ffibuilder = FFI()
ffibuilder.cdef(cdef_text() + "\nconst char *gw_csrc_sha256(void);\n")
ffibuilder.set_source(
    "gpuwrite._gw_cffi",
    "#include <stdint.h>\n#include <stddef.h>\n"
    + "".join(f'#include "{name}"\n' for name in HEADERS)
    + f'const char *gw_csrc_sha256(void) {{ return "{csrc_sha256()}"; }}\n',
    sources=["csrc/gw_engine.c", "csrc/gw_link.c", "csrc/gw_pull.c", "csrc/gw_pong.c",
             "csrc/gw_copy.c"],   # relative: setuptools builds from the project root
    include_dirs=["csrc"],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function", "-D_FORTIFY_SOURCE=2"],
    libraries=["dl", "pthread"],
)

if __name__ == "__main__":
    import os

    os.chdir(CSRC.parent)
    ffibuilder.compile(tmpdir=".", verbose=False)
