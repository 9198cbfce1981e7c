"""Session 34: does a 256-byte push lose time to the read of its last 128 bytes?

``dv.push_mid`` (one thread, 65 to 256 B) loads its first 128 bytes before its
reservation and the rest after it; the sweep's sources are read from HBM (evicted from
L2), so that second read may sit on the push's path: on every host 256 B takes 0.3 to 0.5
us longer than 64 B against nearly the same bound. Loading all of it first spills
``send_messages`` at the 128-register cap (112 bytes; ``test_registers.py``), so the
variant is measured as a probe: send_messages for gpu_push as committed (CUR) and with
push_mid loading every byte before its reservation (ALL, spilling), in turn, 64 B (a
control: push_small) to 256 B, 32 and 256 threads, sources evicted from L2 as in the
sweep, five rounds. Its variant edits push_mid as it was before session 35 (``78a4e7b``):
on later code ``all_first`` stops at its check that the text it replaces is there. Its
helpers (``send_kernel``, ``gpu_push_kernel``, ``replace_once``) serve the later A/B scripts too.
Usage: python3 benchmarks/scripts/mid_preload_ab.py OUT.jsonl
"""
import sys
import types as pytypes

from _ab import run_rounds

from gpuwrite.device import verbs as V
from gpuwrite.paths import kernels as K

_LATE = """    st, word = push_reserve(Q, i, nbytes, raddr, rkey, signaled, timeout_ns)
    if st != OK:
        return st
    x2 = _load64(src, src_word + 32, chunks - 8)
    x3 = _load64(src, src_word + 48, chunks - 12)
"""
_EARLY = """    x2 = _load64(src, src_word + 32, chunks - 8)
    x3 = _load64(src, src_word + 48, chunks - 12)
    st, word = push_reserve(Q, i, nbytes, raddr, rkey, signaled, timeout_ns)
    if st != OK:
        return st
"""


def _module(src: str, name: str, path: str, inject=None):
    m = pytypes.ModuleType(name)
    m.__file__ = path
    m.__dict__.update(inject or {})
    exec(compile(src, path, "exec"), m.__dict__)
    return m


def replace_once(src: str, old: str, new: str) -> str:
    """``src`` with ``old``, which must occur exactly once, replaced by ``new``: a variant
    built from the package's source fails loudly when that source has moved on."""
    assert src.count(old) == 1, old
    return src.replace(old, new)


def send_kernel(verbs_src: str, kernels_src: str, tag: str, path: int):
    """send_messages for ``path`` (``K.PUSH`` .. ``K.STAGED``) compiled from these sources
    of verbs.py and kernels.py (not cached on disk), beside the package's own."""
    verbs = _module(verbs_src, f"verbs_{tag}", V.__file__)
    for a, b in (("from gpuwrite.device import verbs as dv\n", "dv = VERBS\n"),
                 ("    @cached\n", "")):
        kernels_src = replace_once(kernels_src, a, b)
    return _module(kernels_src, f"kernels_{tag}", K.__file__,
                   {"VERBS": verbs})._send_messages(path)


def gpu_push_kernel(verbs_src: str, kernels_src: str, tag: str):
    """``send_kernel`` for gpu_push."""
    return send_kernel(verbs_src, kernels_src, tag, K.PUSH)


def all_first():
    vsrc = replace_once(open(V.__file__).read(), _LATE, _EARLY)
    return gpu_push_kernel(vsrc, open(K.__file__).read(), "all_first")


def main(out_path: str, rounds: int = 5) -> None:
    evicted = {"source_l2": "evicted"}
    kernels = {"CUR": (K._send_messages(K.PATH_IDS["gpu_push"]), evicted),
               "ALL": (all_first(), evicted)}
    run_rounds(kernels, {64: ["CUR", "ALL"], 128: ["CUR", "ALL"], 256: ["CUR", "ALL"]},
               out_path, rounds=rounds)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5)
