"""Session 27: the adapting first-poll pause's steps. With 128 ns up after a miss and 16 ns
down after a hit (committed, ``dv.next_poll_adj``) the pause settles where eight first
polls in nine find their completion; a bench found 64 B faster than with the fixed 300 ns
and 4 KiB 0.6 us faster, but 256 B and 1 KiB 0.1 to 0.2 us slower. Variants: F (the pause
fixed at 300 ns, ``poll_adapt=False``), C (128 / 16), M (64 / 16: four in five), L (32 /
16: two in three); gpu_push one message in flight, rounds in turn.
Usage: python3 benchmarks/scripts/poll_adapt_steps_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import run_rounds
from poll_adapt_ab import kernel_variant, V_SRC, V, pytypes


def verbs_steps(up: int, down: int):
    s = V_SRC
    assert s.count("_PAUSE_UP_NS = 128\n") == 1 and s.count("_PAUSE_DOWN_NS = 16\n") == 1
    s = s.replace("_PAUSE_UP_NS = 128\n", f"_PAUSE_UP_NS = {up}\n")
    s = s.replace("_PAUSE_DOWN_NS = 16\n", f"_PAUSE_DOWN_NS = {down}\n")
    mod = pytypes.ModuleType(f"verbs_steps_{up}_{down}")
    mod.__file__ = V.__file__
    exec(compile(s, V.__file__, "exec"), mod.__dict__)
    return mod


def main(out_path: str, rounds: int = 3) -> None:
    base = kernel_variant()
    kernels = {"F": (base, {"poll_adapt": False}), "C": base,
               "M": kernel_variant(verbs_steps(64, 16)), "L": kernel_variant(verbs_steps(32, 16))}
    run_rounds(kernels, {size: tuple(kernels) for size in (64, 256, 1024, 4096, 16384)},
               out_path, rounds=rounds, messages=lambda size: 1500,
               extra=lambda r: {"p99": r.latency_p99_us})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
