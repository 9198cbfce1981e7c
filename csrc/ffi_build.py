"""cffi build of gpuwrite's C side (API mode): the layouts header and the NIC engine.

setuptools runs this through ``cffi_modules`` at install time; it can also be run
directly (``python csrc/ffi_build.py``) to build the extension in place.

The extension carries the SHA-256 of the C sources it was compiled from, comments and
layout aside (``lib.gw_csrc_sha256()``, ``c_code``): the emulated backend's code fingerprint
(``gpuwrite.experiments.spec``) includes it, so cached emulated results are keyed by the
engine that produced them, the same in a checkout and in an installed package (which has
no csrc/ to read).
"""
import hashlib
import os
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
    """SHA-256 over the names (csrc/NAME) and code (``c_code``) of ``source_files()``."""
    digest = hashlib.sha256()
    for file in source_files():
        digest.update(f"csrc/{file.name}".encode() + b"\0" + c_code(file.read_bytes()) + b"\0")
    return digest.hexdigest()


def c_code(source: bytes) -> bytes:
    """A C file without its comments and layout: each run of blanks (and each comment) one
    space, no blank lines, string and character literals as written. A corrected comment
    compiles to the same engine, and stored results keyed by this digest stay current.
    (A hand-written scanner: the digest must not depend on a compiler being installed.)"""
    text = source.decode("utf-8", "surrogateescape")
    out: list[str] = []

    def space() -> None:
        if out and out[-1] not in (" ", "\n"):
            out.append(" ")

    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":                       # a literal, escapes and all
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            space()
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c in " \t\r\f\v":
            i += 1
            space()
        else:
            if c == "\n" and out and out[-1] == " ":
                out.pop()
            out.append(c)
            i += 1
    lines = "".join(out).split("\n")
    return "\n".join(line.strip() for line in lines if line.strip()).encode("utf-8", "surrogateescape")


def sanitize_args(spec: str | None) -> list[str]:
    """Compiler and linker flags of a sanitizer build: ``spec`` is GPUWRITE_SANITIZE's value,
    sanitizers as -fsanitize= takes them ("address,undefined"); empty or unset: none. The
    flags change the machine code only: csrc_sha256 reads the source text, so a sanitized
    extension carries the same fingerprint as the normal one. Load it with the sanitizer's
    runtime first (LD_PRELOAD; scripts/sanitize_check.sh does both)."""
    spec = (spec or "").strip()
    if not spec:
        return []
    allowed = {"address", "undefined", "thread"}
    names = [name.strip() for name in spec.split(",")]
    if not names or any(name not in allowed for name in names):
        raise SystemExit(f"GPUWRITE_SANITIZE={spec!r}: allowed a comma-separated list of "
                         f"{sorted(allowed)}")
    if "thread" in names and "address" in names:
        raise SystemExit(f"GPUWRITE_SANITIZE={spec!r}: thread and address cannot be combined "
                         "(their runtimes each take over the process's memory)")
    return [f"-fsanitize={','.join(names)}", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-g", "-O1"]


SANITIZE = sanitize_args(os.environ.get("GPUWRITE_SANITIZE"))

ffibuilder = FFI()
ffibuilder.cdef(cdef_text() + "\nconst char *gw_csrc_sha256(void);\n")
ffibuilder.set_source(
    "gpuwrite._gw_cffi",
    "#include <stdint.h>\n#include <stddef.h>\n"
    + "".join(f'#include "{name}"\n' for name in HEADERS)
    + f'const char *gw_csrc_sha256(void) {{ return "{csrc_sha256()}"; }}\n',
    sources=["csrc/gw_engine.c", "csrc/gw_wqe.c", "csrc/gw_service.c", "csrc/gw_cq.c",
             "csrc/gw_invalidate.c", "csrc/gw_link.c", "csrc/gw_pull.c", "csrc/gw_pong.c",
             "csrc/gw_copy.c"],   # relative: setuptools builds from the project root
    include_dirs=["csrc"],
    # A sanitizer build (GPUWRITE_SANITIZE) drops _FORTIFY_SOURCE: its checked string
    # functions would catch an overflow before the sanitizer could say where it is.
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function"]
    + (SANITIZE or ["-D_FORTIFY_SOURCE=2"]),
    extra_link_args=SANITIZE,
    libraries=["dl", "pthread"],
)

if __name__ == "__main__":
    os.chdir(CSRC.parent)
    ffibuilder.compile(tmpdir=".", verbose=False)
