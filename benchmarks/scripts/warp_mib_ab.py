"""Session 30: why does one warp's 1 MiB gpu_push take 140 us in most runs and 100 in some?

The bench's sweep at 22b03f4 (H100): gpu_push 1 MiB with 32 threads, five runs 101.1,
127.2, 139.8, 139.8, 140.5 us, the engine's turnaround 4.5 to 5.8 us in each, its copy
helpers late for none of their pieces: the GPU side moves. The bound divides by one
warp's copy of a first-read source into mapped host memory (``block_copy_gbytes(32,
fresh=True)``: 12.0 GB/s there, 1 MiB in 87 us); 140 us is 7.5 GB/s. Here, in turn each
round: that ceiling, then gpu_push 1 MiB with 32 threads sent as four 256 KiB WQEs (the
sweep's way), as one WQE, and as four with a staging ring four times larger (no wait for
staging credits), with the GPU's SM clock read (NVML) after each.
Usage: python3 benchmarks/scripts/warp_mib_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import emit, timing

from gpuwrite.bench.suite import block_copy_gbytes
from gpuwrite.paths import runner

MIB = 1 << 20


def sm_clock():
    """The GPU's SM clock now (MHz), or None without NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception:     # no NVML here: the rows say None
        return None


VARIANTS = {
    "wqe256k": dict(chunk_bytes=262144, stage_slot_bytes=4096),
    "whole": dict(chunk_bytes=MIB, stage_slot_bytes=4096),
    "wqe256k_ring4x": dict(chunk_bytes=262144, stage_slot_bytes=4096, stage_slots=1040),
}


def main(out_path: str, rounds: int = 4) -> None:
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            emit(out, round=rnd, v="ceiling_warp_fresh", gbytes=block_copy_gbytes(32, fresh=True),
                 sm_mhz=sm_clock())
            for v, kw in VARIANTS.items():
                r = runner.run("gpu_push", [MIB] * 20, n_qps=1, wait_each=True,
                               block_threads=32, **kw)
                emit(out, round=rnd, v=v, **timing(r), delivered=r.delivered,
                     sm_mhz=sm_clock())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)
