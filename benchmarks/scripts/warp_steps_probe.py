"""Session 35: where the first warp's push spends its time (a probe, not a candidate).

gpu_push posts 257 B to 2 KiB from the block's first warp: the lanes load their share,
lane 0 reserves, a warp barrier hands them the outcome, the lanes store, a second warp
barrier orders their stores before lane 0's doorbell. Its 1 KiB point misses its bound by
0.3 to 0.4 us on the H200s where push_mid's 256 B meets it. Steps are placed by leaving one
out (H200.md's advice where no counters exist): NOSYNC, the second barrier left out (the
doorbell may then overtake lanes' stores: the NIC may send stale bytes, so this variant
measures, it does not send correctly); W256, push_mid turned off, so that 256 B takes the
warp path (the same bookkeeping as push_mid, spread over lanes). Same-host, one message in
flight, sources evicted from L2, the order rotating by round.
Usage: python3 benchmarks/scripts/warp_steps_probe.py OUT.jsonl [rounds] [SIZES] [VARIANTS]
(SIZES and VARIANTS comma-separated; default 256,1024,2048 and CUR,NOSYNC,W256.)
"""
import sys

from _ab import run_variants
from mid_preload_ab import gpu_push_kernel, replace_once

from gpuwrite.device import verbs as V
from gpuwrite.paths import kernels as K

_SECOND_SYNC = ("                        warp_sync(lanes)\n"
                "                        if tid == 0 and status == 0 and not last:\n")
_MID_OK = "    return SMALL_PUSH_BYTES < nbytes <= MID_PUSH_BYTES and _fast16(src, src_word, nbytes)\n"


def kernels() -> dict:
    """Each variant's builder."""
    vsrc, ksrc = open(V.__file__).read(), open(K.__file__).read()
    nosync = replace_once(ksrc, _SECOND_SYNC, _SECOND_SYNC.split("\n", 1)[1])
    w256 = replace_once(vsrc, _MID_OK, "    return False\n")
    return {"CUR": lambda: K._send_messages(K.PATH_IDS["gpu_push"]),
            "NOSYNC": lambda: gpu_push_kernel(vsrc, nosync, "nosync"),
            "W256": lambda: gpu_push_kernel(w256, ksrc, "w256")}


if __name__ == "__main__":
    run_variants(kernels(), sys.argv[1:], (256, 1024, 2048))
