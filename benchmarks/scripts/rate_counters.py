"""The bench's 64 B rate run, 20 times in one process: each run's rate and every engine
counter, to see which one moves with the slow runs."""
import json, os
from gpuwrite.paths import runner
from gpuwrite.bench import suite
out = open(os.path.join(os.environ.get("OUT", "/tmp"), "rate_counters.jsonl"), "w")
for k in range(20):
    r = runner.run("gpu_push", [64] * (256 * 2000), n_qps=256, batch=16, block_threads=32,
                   workers=suite.RATE_WORKERS)
    c = {key: v for key, v in r.counters.items() if isinstance(v, int)}
    row = dict(run=k, mpps=round(suite.message_rate_mpps(r), 1), p50=round(r.latency_p50_us, 1),
               mean_turnaround_ns=round(c["turnaround_ns"] / max(1, c["turnarounds"]), 1), **c)
    print(json.dumps(row), flush=True); out.write(json.dumps(row) + "\n")
