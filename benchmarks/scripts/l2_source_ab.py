"""Session 29: does the bench's sweep read its large payloads from the GPU's L2?

The sweep sends max(20, 400 x 4096 / size) messages a point, each from its own source:
at 256 KiB and 1 MiB, 20 messages, 5 and 20 MiB of source, uploaded just before the run
(cuda.to_device), which an H100's 50 MiB L2 can still hold. Its 32-thread bound divides by
one warp's copy of a source read for the first time (``warp_copy_fresh_gbytes``, 12.1
GB/s in session 29's bench, 14.6 from L2). On one host the bench's 32-thread gpu_push 1
MiB took 97 to 121 us and Fig. 9's (220 messages, 220 MiB of source) 140 to 143. Here, in
turn: 20 and 220 messages, and 20 messages after 128 MiB of other GPU memory was written
(evicting the source from L2), gpu_push with 32 and 256 threads at 256 KiB and 1 MiB.
Usage: python3 benchmarks/scripts/l2_source_ab.py OUT.jsonl [rounds]
"""
import sys

from _ab import emit

from gpuwrite.bench.suite import sweep_wqe_bytes
from gpuwrite.cudaenv import cuda
from gpuwrite.host.memory import evict_l2
from gpuwrite.paths import runner


def main(out_path: str, rounds: int = 3) -> None:
    real_to_device = cuda.to_device

    def evicting_to_device(a, *args, **kw):
        d = real_to_device(a, *args, **kw)
        evict_l2()              # a device-side fill: 128 MiB through the L2 after the upload
        return d

    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for th in (32, 256):
                for size in (262144, 1 << 20):
                    for variant, count in (("20", 20), ("220", 220), ("20-evicted", 20)):
                        runner.cuda.to_device = evicting_to_device if variant == "20-evicted" \
                            else real_to_device
                        try:
                            r = runner.run("gpu_push", [size] * count, n_qps=1, wait_each=True,
                                           block_threads=th,
                                           chunk_bytes=sweep_wqe_bytes("gpu_push", size),
                                           stage_slot_bytes=4096)
                        finally:
                            runner.cuda.to_device = real_to_device
                        assert r.delivered == r.messages
                        emit(out, round=rnd, threads=th, size=size, v=variant,
                             p50=round(r.latency_p50_us, 2))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
