"""Pinned vs unpinned engine threads, taken in turn: the 64 B rate, Fig. 4's points,
the 64 B single-message latency against the floor."""
import json, os, sys, time
from gpuwrite.host.verbs import Context, process_cpus
from gpuwrite.paths import runner
from gpuwrite.bench import suite

out = open(os.path.join(os.environ.get("OUT", "/tmp"), "pin_ab.jsonl"), "w")
def emit(**kw):
    kw["t"] = round(time.time(), 2)
    line = json.dumps(kw); print(line, flush=True); out.write(line + "\n"); out.flush()

print("cpus", process_cpus(), flush=True)
os.system("lscpu | egrep 'Model name|Thread|Core|Socket|NUMA'; nproc")

def ctx(workers, pin, copy=None):
    return Context(workers=workers, pin_threads=pin, copy_threads=copy)

# A. the rate
rate_cfgs = [(12, False), (12, True), (14, False), (14, True)]
for rnd in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
    for w, pin in rate_cfgs:
        with ctx(w, pin) as c:
            r = runner.run("gpu_push", [64] * (256 * 2000), n_qps=256, batch=16, block_threads=32,
                           context=c)
        emit(part="rate", workers=w, pin=pin, cpus=r.engine_cpus, mpps=round(suite.message_rate_mpps(r), 2),
             delivered=r.delivered, messages=r.messages)

# B. Fig. 4's configuration
points = [("gpu_push", 64), ("gpu_push", 4096), ("gpu_push", 262144), ("gpu_push", 1 << 20),
          ("host_staged", 1 << 20), ("nic_pull", 65536), ("host_staged", 4096)]
kw = dict(n_qps=32, batch=4, block_threads=256, chunk_bytes=1 << 20, stage_slot_bytes=4096)
for rnd in range(3):
    for path, size in points:
        for pin in (False, True):
            n = min(max(256, (256 << 20) // size), 200000)
            with ctx(8, pin) as c:
                runner.run(path, [size] * 64, context=c, **kw)
                r = runner.run(path, [size] * n, context=c, **kw)
            emit(part="fig4", path=path, size=size, pin=pin, gbps=round(r.throughput_gbps, 1),
                 p50_us=round(r.latency_p50_us, 2), p99_us=round(r.latency_p99_us, 2),
                 delivered=r.delivered, messages=n, helpers=c.copy_threads, cpus=r.engine_cpus)

# C. one 64 B message in flight against the floor
for rnd in range(5):
    f = suite.floor_pingpong_us(2000)
    for pin in (False, True):
        with ctx(1, pin) as c:
            r = runner.run("gpu_push", [64] * 2000, n_qps=1, batch=1, block_threads=256,
                           wait_each=True, context=c)
        emit(part="lat64", pin=pin, floor_us=round(f, 3), p50_us=round(r.latency_p50_us, 3),
             p99_us=round(r.latency_p99_us, 3), ratio=round(r.latency_p50_us / f, 3))
