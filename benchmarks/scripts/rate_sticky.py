"""Is a slow 64 B rate run a property of its allocations? Three sessions (three sets of
rings, CQs and buffers), ten launches of the put rate kernel on each, in one process."""
import json, os
import numpy as np
from experiments.apps import bench, common
from gpuwrite.cudaenv import cuda
from gpuwrite.device import api
from gpuwrite.bench import suite
out = open(os.path.join(os.environ.get("OUT", "/tmp"), "rate_sticky.jsonl"), "w")
n_qps, per_qp = (2, 4) if os.environ.get("TOY") else (256, 2000)
n = n_qps * per_qp
for sess in range(2 if os.environ.get("TOY") else 4):
    with api.Session(n_qps, thresholds=api.Thresholds.fixed("gpu_push"), workers=suite.RATE_WORKERS,
                     **bench.SMALL_RINGS) as s:
        payload, src, smr, dst, dmr = bench._buffers(s, n, 64)
        t_first = cuda.to_device(np.zeros(n_qps, dtype=np.int64))
        t_last = cuda.to_device(np.zeros(n_qps, dtype=np.int64))
        status = cuda.to_device(np.full(n_qps, 99, dtype=np.int64))
        s.start()
        prm = bench._prm(dmr, smr, 64, per_qp, 16)
        for k in range(2 if os.environ.get("TOY") else 10):
            bench.put_stream[n_qps, 32](s.Q, s.cfg, src, prm, api.PATH_IDS["gpu_push"], True,
                                        t_first, t_last, status)
            common.sync()
            span = int(t_last.copy_to_host().max() - t_first.copy_to_host().min())
            st = status.copy_to_host()
            c = s.context.counters()
            row = dict(session=sess, launch=k, mpps=round(n / span * 1e3, 1), ok=bool((st == 0).all()),
                       delivered=bench._delivered(payload, dst, n), doorbells=c["doorbells"], turn=c["turnaround_ns"], turns=c["turnarounds"])
            print(json.dumps(row), flush=True); out.write(json.dumps(row) + "\n")
