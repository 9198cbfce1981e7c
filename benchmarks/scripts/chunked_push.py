"""Does splitting a large one-in-flight push into WQEs pay, with staging to hold it all?"""
import json, os, time
import numpy as np
from gpuwrite.paths import runner
from gpuwrite.bench import suite

out = {}
floor = float(np.median([suite.floor_pingpong_us(2000) for _ in range(3)]))
bulk = suite.bulk_store_gbytes(256 << 20)
warp = suite.block_copy_gbytes(32)
blk = suite.block_copy_gbytes(256)
out["floor"], out["bulk"], out["warp"], out["blk"] = floor, bulk, warp, blk
print(f"floor {floor:.2f} bulk {bulk:.1f} warp {warp:.2f} block256 {blk:.1f}", flush=True)
K = 1024
cfgs = []
for th in (32, 256):
    for size in (64 * K, 256 * K, 1024 * K):
        for chunk in (16 * K, 32 * K, 64 * K, 128 * K, 256 * K, size):
            if chunk > size or (chunk < 32 * K and size > 256 * K):
                continue
            cfgs.append(("gpu_push", th, size, chunk, 4096))
        cfgs.append(("host_staged", th, size, size, 4096))
        if size >= 256 * K:
            cfgs.append(("host_staged", th, size, 64 * K, 4096))
        cfgs.append(("nic_pull", th, size, size, 4096))
cfgs.append(("gpu_push", 256, 1024 * K, 64 * K, 256))   # session 7's configuration
res = {str(c): [] for c in cfgs}
for rnd in range(3):
    for c in cfgs:
        path, th, size, chunk, slot = c
        n = 40 if size >= 256 * K else 100
        need = -(-size // slot) + 2 * (-(-chunk // slot))
        kw = dict(n_qps=1, wait_each=True, block_threads=th, chunk_bytes=chunk,
                  stage_slot_bytes=slot)
        if path == "gpu_push":
            kw["stage_slots"] = max(64, 2 * need)   # room for two messages: no credit waits
        if path == "host_staged":
            kw["bounce_bytes"] = 2 * size + 2 * chunk
        t = time.time()
        try:
            r = runner.run(path, [size] * n, **kw)
            sp = suite.engine_split_us(r)
            row = dict(p50=r.latency_p50_us, eng=sp["engine"], ok=r.delivered == r.messages)
        except Exception as e:
            row = dict(err=repr(e)[:200])
        res[str(c)].append(row)
        print(rnd, c, row, f"{time.time()-t:.1f}s", flush=True)
out["res"] = res
json.dump(out, open(os.environ.get("OUT", "/tmp") + "/chunk.json", "w"), indent=1)
print("\nsummary (p50 us over rounds; bound = floor + crossings*size/ceiling)")
for c in cfgs:
    path, th, size, chunk, slot = c
    g = warp if th <= 32 else bulk
    bound = floor + (2 if path == "host_staged" else 1) * size / (g * 1e3)
    p = [x.get("p50", float("nan")) for x in res[str(c)]]
    e = [x.get("eng", float("nan")) for x in res[str(c)]]
    print(f"{path:12s} th={th:3d} size={size//K:5d}K chunk={chunk//K:5d}K slot={slot:5d} "
          f"p50 {min(p):7.2f}/{np.median(p):7.2f}/{max(p):7.2f}  ratio {np.median(p)/bound:5.2f}  eng {np.median(e):6.2f}")
