"""The 64 B rate run, pinned and not, in turn: per run its rate and, per engine worker,
the median latency of the messages of its QPs (QP k completes into CQ k + 1, served by
worker (k + 1) % workers): a slow worker shows as late completions on its QPs only."""
import json, os
import numpy as np
from gpuwrite.host.verbs import Context
from gpuwrite.paths import runner
from gpuwrite.bench import suite

W, NQ, PER = 12, 256, 2000
out = open(os.path.join(os.environ.get("OUT", "/tmp"), "rate_diag.jsonl"), "w")
for rnd in range(8):
    for pin in (False, True):
        with Context(workers=W, pin_threads=pin) as c:
            r = runner.run("gpu_push", [64] * (NQ * PER), n_qps=NQ, batch=16, block_threads=32,
                           context=c)
        lat = r.latencies_ns.reshape(NQ, PER) if r.delivered == NQ * PER else None
        per_w = {}
        if lat is not None:
            qmed = np.median(lat, axis=1)
            for w in range(W):
                per_w[w] = round(float(np.median(qmed[[(k) for k in range(NQ) if (k + 1) % W == w]])) / 1e3, 1)
        row = dict(pin=pin, mpps=round(suite.message_rate_mpps(r), 1), p50=round(r.latency_p50_us, 1),
                   p99=round(r.latency_p99_us, 1), per_worker_p50_us=per_w,
                   turnaround_ns=round(r.counters["turnaround_ns"] / max(1, r.counters["turnarounds"]), 1))
        print(json.dumps(row), flush=True); out.write(json.dumps(row) + "\n")
