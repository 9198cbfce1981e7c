"""Is a slow 64 B rate run a property of its allocations? Three sessions (three sets of
rings, CQs and buffers), ten launches of the put rate kernel on each, in one process."""
import json, os
from _rate import RateLaunches
from experiments.apps import bench
from gpuwrite.device import api
from gpuwrite.bench import suite
out = open(os.path.join(os.environ.get("OUT", "/tmp"), "rate_sticky.jsonl"), "w")
n_qps, per_qp = (2, 4) if os.environ.get("TOY") else (256, 2000)
for sess in range(2 if os.environ.get("TOY") else 4):
    with api.Session(n_qps, thresholds=api.Thresholds.fixed("gpu_push"), workers=suite.RATE_WORKERS,
                     **bench.SMALL_RINGS) as s:
        rate = RateLaunches(s, n_qps, per_qp)
        for k in range(2 if os.environ.get("TOY") else 10):
            row = dict(session=sess, launch=k, **rate.launch())
            c = s.context.counters()
            row.update(doorbells=c["doorbells"], turn=c["turnaround_ns"], turns=c["turnarounds"])
            print(json.dumps(row), flush=True); out.write(json.dumps(row) + "\n")
