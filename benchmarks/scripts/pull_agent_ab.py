"""The pull agent's answer, one pull in flight, by size: session 43's two changes, not merged
(``agent_warp_copy.patch``, on ``5d0efb8``; no faster, BENCHMARKS.md), against the agent
without them ("old") and with the first alone ("v1", ``HELPER_POLL_PAUSE_NS = 0``): batches
of at most ``WARP_COPY_BYTES`` copied by the first warp alone (the other 15 warps of its
block no longer run ``copy_bytes``' set-up for them) and helper blocks pausing
``HELPER_POLL_PAUSE_NS`` between their polls of the claim word (three helpers reading it
back to back beside the leader). Sources evicted from L2 (every pull reads HBM, as the
bench's sweep does), a 32-thread sender; then 64-byte pulls of 32 QPs and the bench's 1 MiB
bandwidth run, so that batching and splits are seen too.

Run once per code version, in turn, each process on the package its PYTHONPATH finds:
    python3 pull_agent_ab.py LABEL ROUND >> out.jsonl
"""
import json
import sys

from gpuwrite.bench.suite import BANDWIDTH_RUN, engine_split_us
from gpuwrite.paths import runner

SIZES = (64, 1024, 4096, 16384, 65536, 1 << 20)


def main(label: str, rnd: int) -> None:
    def out(**kw):
        print(json.dumps({"label": label, "round": rnd, **kw}), flush=True)

    for size in SIZES:
        n = 400 if size <= 4096 else 100 if size <= 65536 else 25
        r = runner.run("nic_pull", [size] * n, n_qps=1, wait_each=True, block_threads=32,
                       source_l2="evicted", chunk_bytes=max(size, 65536))
        out(what="latency", size=size, ok=r.delivered == r.messages and not r.qp_errors,
            p50_us=round(r.latency_p50_us, 3),
            engine_us=round(engine_split_us(r)["engine"], 3))
    batching_runs(out)


def batching_runs(out) -> None:
    """64-byte pulls of 32 QPs and the bench's 1 MiB bandwidth run (the agent's batches and
    splits), each reported through ``out``."""
    r = runner.run("nic_pull", [64] * (32 * 200), n_qps=32, block_threads=32)
    out(what="64B_32qps", ok=r.delivered == r.messages, gbps=round(r.throughput_gbps, 2))
    r = runner.run("nic_pull", [1 << 20] * 256, **BANDWIDTH_RUN["nic_pull"])
    out(what="1MiB_bandwidth", ok=r.delivered == r.messages, gbps=round(r.throughput_gbps, 2))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
