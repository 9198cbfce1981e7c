"""After the eight-deep copy: send_messages' registers, the copy ceilings (one warp and one
256-thread block, from L2 and from a source read for the first time), and one message in
flight at 4 KiB to 1 MiB per path against both bounds (three rounds taken in turn)."""
import json, os
import numpy as np
from gpuwrite.paths import runner, kernels as K
from gpuwrite.bench import suite
out = {}
r = runner.run("gpu_push", [1 << 16] * 4, n_qps=1, wait_each=True, block_threads=256)
for name, k in (("send_messages", K.send_messages_for("gpu_push")),):
    print(name, "regs", k.get_regs_per_thread(), "local", k.get_local_mem_per_thread(), flush=True)
r = runner.run("nic_pull", [1 << 16] * 4, n_qps=1, wait_each=True, block_threads=256)
ce = {}
for rnd in range(3):
    for th in (32, 256):
        for fresh in (False, True):
            ce.setdefault(f"{th} {'fresh' if fresh else 'L2'}", []).append(suite.block_copy_gbytes(th, fresh=fresh))
for k, v in ce.items():
    print("copy", k, [round(x, 2) for x in v], flush=True)
out["ceilings"] = ce
floor = float(np.median([suite.floor_pingpong_us(2000) for _ in range(3)]))
bulk = suite.bulk_store_gbytes(256 << 20)
print("floor", floor, "bulk", bulk, flush=True)
K_ = 1024
cfgs = [(p, th, s) for th in (32, 256) for s in (4 * K_, 64 * K_, 256 * K_, 1024 * K_)
        for p in ("gpu_push", "host_staged", "nic_pull")]
res = {str(c): [] for c in cfgs}
for rnd in range(3):
    for c in cfgs:
        path, th, size = c
        n = max(20, min(400, 400 * 4096 // size))
        rr = runner.run(path, [size] * n, n_qps=1, wait_each=True, block_threads=th,
                        chunk_bytes=max(size, 65536), stage_slot_bytes=4096 if size > 65536 else 256)
        res[str(c)].append(dict(p50=rr.latency_p50_us, eng=suite.engine_split_us(rr)["engine"],
                                ok=rr.delivered == rr.messages))
for c in cfgs:
    path, th, size = c
    w = np.median(ce[f"{th} fresh"]) if th <= 32 else bulk
    wl = np.median(ce[f"{th} L2"]) if th <= 32 else bulk
    cross = 2 if path == "host_staged" else 1
    b, bl = floor + cross * size / (w * 1e3), floor + cross * size / (wl * 1e3)
    p = [x["p50"] for x in res[str(c)]]
    print(f"{path:12s} th={th:3d} {size//K_:5d}K p50 {min(p):7.2f}/{np.median(p):7.2f}/{max(p):7.2f} "
          f"x(fresh bound) {np.median(p)/b:5.2f}  x(L2 bound) {np.median(p)/bl:5.2f} eng {np.median([x['eng'] for x in res[str(c)]]):6.2f} ok {all(x['ok'] for x in res[str(c)])}", flush=True)
out["res"] = res
json.dump(out, open(os.environ.get("OUT", "/tmp") + "/s19c.json", "w"), indent=1)
