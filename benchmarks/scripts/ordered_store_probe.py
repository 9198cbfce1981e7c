"""What ordered placement would cost the pull agent (session 47's lead).

The agent copies a batch of small pulls a warp each, side by side, so the bytes of two
pulls of one QP that do not overlap may become visible in either order, where a NIC
places a QP's writes in order (README, "put_signal"). Ordering them means a fence at
system scope between one pull's stores and the next's. One block of 256 threads copies
a batch of eight requests of ``size`` bytes from GPU memory into mapped host memory, as
the agent does, in four ways, timed with %globaltimer from the batch's start to its last
fence (the median of ``reps`` batches):

- ``parallel``: a warp a request, one fence at the end (the agent since session 46);
- ``block_seq``: the whole block a request after another, a barrier between (the agent's
  copy of overlapping requests: ordered for the block, not for an observer elsewhere);
- ``block_seq_fenced``: the same with a system-scope fence before each barrier (ordered
  for every observer);
- ``chain``: every warp loads its request into shared memory side by side, then warp j
  stores its request once warp j - 1 has stored and fenced (loads in parallel, stores in
  order).

    python3 ordered_store_probe.py ROUND >> out.jsonl
"""
import json
import sys

import numpy as np
from numba import cuda, int64, uint32

from gpuwrite.device.intrinsics import fence_sys, globaltimer_ns, words_at
from gpuwrite.host.memory import mapped
from gpuwrite.paths.pull_agent import _copy

NREQ = 8
MAX_WORDS = 1024           # 4 KiB a request in shared memory
MODES = ("parallel", "block_seq", "block_seq_fenced", "chain")


@cuda.jit
def _batches(dst, src, size, mode, reps, out):
    tid = cuda.threadIdx.x
    warp, lane = tid >> 5, tid & 31
    stage = cuda.shared.array((NREQ, MAX_WORDS), dtype=uint32)
    flag = cuda.shared.array(1, dtype=int64)
    nwords = size >> 2
    for r in range(reps):
        if tid == 0:
            flag[0] = 0
        cuda.syncthreads()
        t0 = globaltimer_ns()
        if mode == 0:
            if warp < NREQ:
                _copy(dst + warp * size, src + warp * size, size, lane, 32)
        elif mode == 1 or mode == 2:
            for j in range(NREQ):
                _copy(dst + j * size, src + j * size, size, tid, cuda.blockDim.x)
                if mode == 2:
                    fence_sys()
                cuda.syncthreads()
        else:
            if warp < NREQ:
                s = warp * nwords
                # loads side by side (GPU memory, as the agent reads a pull's source)
                w = lane
                srcw = words_at(src, NREQ * MAX_WORDS)
                while w < nwords:
                    stage[warp, w] = srcw[s + w]
                    w += 32
                cuda.syncwarp()
                if lane == 0:
                    while cuda.atomic.add(flag, 0, 0) < warp:
                        pass
                cuda.syncwarp()
                dstw = words_at(dst, NREQ * MAX_WORDS)
                w = lane
                while w < nwords:
                    dstw[s + w] = stage[warp, w]
                    w += 32
                fence_sys()
                cuda.syncwarp()
                if lane == 0:
                    cuda.atomic.add(flag, 0, 1)
        cuda.syncthreads()
        if tid == 0:
            fence_sys()
            out[r] = globaltimer_ns() - t0


def main(round_no: int) -> None:
    reps = 400
    for size in (64, 1024, 4096):
        src = cuda.to_device((np.arange(NREQ * size // 4) * 2654435761 % (1 << 32))
                             .astype(np.uint32))
        dst = mapped((NREQ * size // 4,), np.uint32)
        out = cuda.to_device(np.zeros(reps, dtype=np.int64))
        saddr = src.__cuda_array_interface__["data"][0]
        for m, name in enumerate(MODES):
            dst.host[:] = 0
            _batches[1, 256](dst.address, saddr, size, m, reps, out)
            cuda.synchronize()
            ns = out.copy_to_host()[20:]
            ok = bool(np.array_equal(dst.host, src.copy_to_host()))
            print(json.dumps({"round": round_no, "size": size, "mode": name,
                              "p50_us": float(np.median(ns)) / 1e3,
                              "min_us": float(ns.min()) / 1e3, "exact": ok}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
