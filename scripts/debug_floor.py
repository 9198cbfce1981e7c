import numpy as np
from gpuwrite.bench import suite
from gpuwrite.host.memory import mapped
from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.cudaenv import cuda
for iters in (100, 200, 2000):
    ping = mapped((16,), np.uint32); pong = mapped((16,), np.uint32)
    out = cuda.to_device(np.zeros(iters, dtype=np.int64))
    r = lib.gw_pong_start(ffi.cast("void *", ping.address), ffi.cast("void *", pong.address))
    suite._pingpong[1, 32](ping.kernel, pong.kernel, iters, out, 2_000_000_000)
    cuda.synchronize()
    lib.gw_pong_stop(r)
    ns = out.copy_to_host()
    bad = np.nonzero(ns < 0)[0]
    print(iters, "bad", bad[:5], "ping", ping.host[0], "pong", pong.host[0], "median", np.median(ns[ns > 0]) if (ns > 0).any() else None)
