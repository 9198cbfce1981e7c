"""64 B latency (gpu_push, one message in flight) and the floor, with the engine's one
worker (and the floor's responder) on each CPU in turn."""
import json, os
import numpy as np
from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.host.verbs import Context, process_cpus
from gpuwrite.host.memory import mapped
from gpuwrite.cudaenv import cuda
from gpuwrite.paths import runner
from gpuwrite.bench import suite

out = open(os.path.join(os.environ.get("OUT", "/tmp"), "cpu_sweep.jsonl"), "w")
def emit(**kw):
    line = json.dumps(kw); print(line, flush=True); out.write(line + "\n"); out.flush()

ALL = set(process_cpus())
def floor_on(cpu, iters=1000):
    ping = mapped((16,), np.uint32); pong = mapped((16,), np.uint32)
    d = cuda.to_device(np.zeros(iters, dtype=np.int64))
    os.sched_setaffinity(0, {cpu})
    try:
        resp = lib.gw_pong_start(ffi.cast("void *", ping.address), ffi.cast("void *", pong.address), 0, 1)
    finally:
        os.sched_setaffinity(0, ALL)
    try:
        suite._pingpong[1, 32](ping.kernel, pong.kernel, iters, d, 2_000_000_000, 0)
        cuda.synchronize()
    finally:
        lib.gw_pong_stop(resp)
    return suite._p50_after_start_us(d.copy_to_host())

def push_on(cpu, path="gpu_push", n=1000):
    with Context(workers=1, copy_threads=0, pin_threads=[cpu]) as c:
        r = runner.run(path, [64] * n, n_qps=1, batch=1, block_threads=256, wait_each=True, context=c)
    return r.latency_p50_us

suite.floor_pingpong_us(200); push_on(0, n=200)
cpus = process_cpus()
res = {c: [] for c in cpus}
for rnd in range(3):
    order = cpus if rnd % 2 == 0 else cpus[::-1]
    for c in order:
        f = floor_on(c); p = push_on(c); pi = push_on(c, "gpu_push_inline")
        res[c].append(p)
        emit(part="sweep", rnd=rnd, cpu=c, floor_us=round(f, 3), push_us=round(p, 3), inline_us=round(pi, 3))
med = {c: float(np.median(v)) for c, v in res.items()}
best = min(med, key=med.get); worst = max(med, key=med.get)
for rnd in range(5):
    f = suite.floor_pingpong_us(1000)
    for c in (best, worst):
        emit(part="confirm", rnd=rnd, cpu=c, floor_us=round(f, 3), push_us=round(push_on(c, n=2000), 3))
