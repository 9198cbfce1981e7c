"""Session 27: a first-poll pause that adapts to where the completion lands.

``poll_delay_sizes.py`` found the best pause before a wait's first completion poll to
grow with the message (64 B and 1 KiB: 300 ns, the default; 4 KiB: 900 ns, 0.84 us faster;
16 and 64 KiB: 600 to 900), and where it lies to depend on the engine's copy rate and the
host's read time. Variant P adapts it per QP inside the kernel: after a wait for every WQE
written, the pause shrinks by DOWN ns if the first poll found the completion, and grows by
UP ns if it did not (bounded to 0 .. 8 us), so the first read settles just after the
completion lands and misses about DOWN / (UP + DOWN) of the time (a whole read then).
The prototype keeps the pause in the QP's info row (``I_POLL_DELAY_NS``), which a
``send_messages`` block holds in shared memory for the whole launch. Variants: A (as
committed), P (UP 128, DOWN 16), Q (UP 256, DOWN 32); gpu_push 64 B to 64 KiB, 32 and
256 threads, rounds in turn (``_ab.run_rounds``).
Its replacements expect the verbs as they were before the change it led to (`03c2198`);
``kernel_variant`` (today's kernel, or one made with another verbs module) is shared with
``poll_adapt_steps_ab.py``.
Usage: python3 benchmarks/scripts/poll_adapt_ab.py OUT.jsonl [rounds]
"""
import sys
import types as pytypes

from _ab import run_rounds
from gpuwrite.device import verbs as V
from gpuwrite.paths import kernels as K

V_SRC = open(V.__file__).read()
K_SRC = open(K.__file__).read()

WAIT_START = """    delay = Q[Q_INFO][i, I_POLL_DELAY_NS] if column == S_DONE and target >= state[i, S_PI] else 0
"""
WAIT_START_P = """    whole = column == S_DONE and target >= state[i, S_PI]
    delay = Q[Q_INFO][i, I_POLL_DELAY_NS] if whole else 0
"""
WAIT_END = """                backoff(pause)
                pause = min(2 * pause, pause_max_ns)
    return OK
"""
WAIT_END_P = """                backoff(pause)
                pause = min(2 * pause, pause_max_ns)
    if whole:
        Q[Q_INFO][i, I_POLL_DELAY_NS] = min(delay + {up}, 8000) if polls > 0 else max(delay - {down}, 0)
    return OK
"""


def verbs_variant(up: int, down: int):
    s = V_SRC
    assert s.count(WAIT_START) == 1 and s.count(WAIT_END) == 1
    s = s.replace(WAIT_START, WAIT_START_P).replace(WAIT_END, WAIT_END_P.format(up=up, down=down))
    mod = pytypes.ModuleType(f"verbs_adapt_{up}_{down}")
    mod.__file__ = V.__file__
    exec(compile(s, V.__file__, "exec"), mod.__dict__)
    return mod


def kernel_variant(verbs=None):
    s = K_SRC.replace("@cached\n    @cuda.jit(**_LIMITS)", "@cuda.jit(**_LIMITS)")
    mod = pytypes.ModuleType("pa")
    mod.__file__ = K.__file__
    if verbs is not None:
        assert s.count("from gpuwrite.device import verbs as dv\n") == 1
        s = s.replace("from gpuwrite.device import verbs as dv\n", "dv = VERBS\n")
        mod.__dict__["VERBS"] = verbs
    exec(compile(s, K.__file__, "exec"), mod.__dict__)
    return mod._send_messages(K.PUSH)


if __name__ == "__main__":
    kernels = {"A": kernel_variant(), "P": kernel_variant(verbs_variant(128, 16)),
               "Q": kernel_variant(verbs_variant(256, 32))}
    sizes = (64, 256, 1024, 4096, 16384, 65536)
    run_rounds(kernels, {size: ("A", "P", "Q") for size in sizes}, sys.argv[1],
               rounds=int(sys.argv[2]) if len(sys.argv) > 2 else 3,
               messages=lambda size: 1500 if size <= 16384 else 500)
