"""The bench's 1 MiB bandwidth runs (gpu_push, host_staged; BANDWIDTH_RUN), six of each in
turn, in one process; the argument tags the printed line. Session 19 ran it in trees with
the old and the new copy_bytes, one process after another (old, new, old, new)."""
import sys, json
from gpuwrite.paths import runner
from gpuwrite.bench import suite
tag = sys.argv[1]
mib = 1 << 20
res = {"gpu_push": [], "host_staged": []}
for k in range(6):
    for path in res:
        r = runner.run(path, [mib] * 1024, **suite.BANDWIDTH_RUN[path])
        res[path].append(round(r.throughput_gbps / 8, 1))
print(tag, json.dumps(res), flush=True)
