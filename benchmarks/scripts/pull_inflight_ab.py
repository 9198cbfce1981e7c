"""nic_pull with the pulls of several QPs in flight at once (session 45, ``csrc/gw_pull.c``):
the engine before ("old": a worker waited for each QP's pulls before it served the next QP)
against after ("new": pulls stay posted while the worker serves its other QPs, their
answers taken by later passes). One message in flight per QP, 1, 4 and 16 QPs, with the
bench's sweep settings; then Fig. 4's saturated runs (32 QPs, 4 messages in flight each,
8 engine workers); gpu_push's 64-byte latency as a control (its code changed by one call
per pass).

Run once per code version, in turn, each process on the package its PYTHONPATH finds:
    python3 pull_inflight_ab.py LABEL ROUND [SLOTS] [fig4] >> out.log
SLOTS: the agent's ring slots (``PullAgent(slots=...)``, default 64); ``fig4``: only
Fig. 4's runs.
"""
import functools
import json
import sys

from gpuwrite.bench.suite import engine_split_us
from gpuwrite.host.verbs import Context
from gpuwrite.paths import runner

SIZES = (64, 4096, 65536)


def main(label: str, rnd: int, slots: int | None = None, only_fig4: bool = False) -> None:
    def out(**kw):
        print(json.dumps({"label": label, "round": rnd, **kw}), flush=True)

    if slots is not None:
        from gpuwrite.paths.pull_agent import PullAgent
        runner.PullAgent = functools.partial(PullAgent, slots=slots)
    if not only_fig4:
        latency_runs(out)
    for size, n in ((64, 32 * 1000), (4096, 32 * 400), (65536, 32 * 100), (1 << 20, 256)):
        with Context(workers=8) as ctx:
            r = runner.run("nic_pull", [size] * n, n_qps=32, batch=4, block_threads=256,
                           chunk_bytes=1 << 20, context=ctx)
            c = ctx.counters()
        out(what="fig4", size=size, ok=r.delivered == r.messages and not r.qp_errors,
            gbps=round(r.throughput_gbps, 2),
            agent_us=round(c["pull_agent_ns"] / max(1, c["pull_agent_answers"]) / 1e3, 2))


def latency_runs(out) -> None:
    r = runner.run("gpu_push", [64] * 2000, n_qps=1, wait_each=True, block_threads=32)
    out(what="push_64B", ok=r.delivered == r.messages and not r.qp_errors,
        p50_us=round(r.latency_p50_us, 3))
    for qps in (1, 4, 16):
        for size in SIZES:
            n = qps * (400 if size <= 4096 else 100)
            r = runner.run("nic_pull", [size] * n, n_qps=qps, wait_each=True, block_threads=256,
                           source_l2="evicted", chunk_bytes=max(size, 65536))
            out(what="latency", qps=qps, size=size,
                ok=r.delivered == r.messages and not r.qp_errors,
                p50_us=round(r.latency_p50_us, 3), p99_us=round(r.latency_p99_us, 3),
                engine_us=round(engine_split_us(r)["engine"], 3))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None,
         "fig4" in sys.argv[4:])
