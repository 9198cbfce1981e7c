"""Does the 64 B rate slow down with the time the engine's workers have spun? One session
per configuration, twelve launches of the put rate kernel each:
  spin   : back to back, the engine spinning throughout (the bench's way)
  spin+gap: 0.5 s sleeps between launches, the engine spinning through them
  rest   : 0.5 s between launches with the engine stopped (its threads joined)
  idle   : 0.5 s between launches, workers sleeping when idle (idle_sleep_ns=50 us)"""
import json, os, time
from _rate import RateLaunches
from experiments.apps import bench
from gpuwrite.device import api
from gpuwrite.host.verbs import Context
from gpuwrite.bench import suite
out = open(os.path.join(os.environ.get("OUT", "/tmp"), "rate_power.jsonl"), "w")
TOY = bool(os.environ.get("TOY"))
n_qps, per_qp = (2, 4) if TOY else (256, 2000)

def mhz():
    v = [float(l.split(":")[1]) for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")]
    return round(sum(v) / len(v), 1) if v else None

for rnd in range(1 if TOY else 2):
    for mode in ("spin", "spin+gap", "rest", "idle"):
        ctx = Context(workers=suite.RATE_WORKERS, idle_sleep_ns=50_000 if mode == "idle" else 0)
        with api.Session(n_qps, thresholds=api.Thresholds.fixed("gpu_push"), context=ctx,
                         **bench.SMALL_RINGS) as s:
            rate = RateLaunches(s, n_qps, per_qp)
            t0 = time.monotonic()
            for k in range(2 if TOY else 12):
                if k and mode != "spin":
                    if mode == "rest":
                        ctx.stop()
                    time.sleep(0.05 if TOY else 0.5)
                    if mode == "rest":
                        ctx.start()
                row = dict(rnd=rnd, mode=mode, launch=k, t_s=round(time.monotonic() - t0, 2),
                           **rate.launch(), mhz=mhz())
                print(json.dumps(row), flush=True); out.write(json.dumps(row) + "\n")
        ctx.close()
        time.sleep(0 if TOY else 2)
