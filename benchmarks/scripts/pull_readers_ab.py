"""The pull agent's reader warps (session 44, ``agent_readers.patch`` on ``8d94090``; measured,
not merged: BENCHMARKS.md): nic_pull, one pull in flight, with the agent's ring polled by
its first warp alone (``readers=0``) and by ``pa.READERS`` warps polling a replica each,
``pa.POLL_RTT_NS / readers`` apart, in turn within one process (the patched tree); and,
run with another tree on PYTHONPATH and READERS "-", the agent as that tree has it. Per
point: the engine's p50, the agent's round trip as the engine saw it (``pull_agent_ns`` /
``pull_agent_answers``) and the engine's part; then 64-byte pulls of 32 QPs and the
bench's 1 MiB bandwidth run (batching and splits).

    python3 pull_readers_ab.py LABEL ROUND READERS,... >> out.jsonl
"""
import json
import sys

from pull_agent_ab import batching_runs

from gpuwrite.bench.suite import agent_wait_us, engine_split_us
from gpuwrite.paths import pull_agent as pa
from gpuwrite.paths import runner

SIZES = (64, 4096, 65536)
READERS = getattr(pa, "READERS", None)


def point(size: int, threads: int) -> dict:
    n = 400 if size <= 4096 else 100
    r = runner.run("nic_pull", [size] * n, n_qps=1, wait_each=True, block_threads=threads,
                   source_l2="evicted", chunk_bytes=max(size, 65536))
    agent = agent_wait_us(r.counters)
    return {"ok": r.delivered == r.messages and not r.qp_errors,
            "p50_us": round(r.latency_p50_us, 3),
            "agent_us": None if agent is None else round(agent, 3),
            "engine_us": round(engine_split_us(r)["engine"], 3)}


def main(label: str, rnd: int, order: list) -> None:
    for readers in order:
        if readers is not None:
            pa.READERS = readers            # PullAgent's default, read at its creation

        def out(**kw):
            print(json.dumps({"label": label, "round": rnd, "readers": readers, **kw}),
                  flush=True)
        for threads in (32, 256):
            for size in SIZES:
                out(what="latency", size=size, threads=threads, **point(size, threads))
        batching_runs(out)
    if READERS is not None:
        pa.READERS = READERS


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]),
         [None if r == "-" else int(r) for r in sys.argv[3].split(",")])
