"""(Session 39: runs only with the watched waits of the commit that added this file, reverted after it.)
Where a watched wait's time goes: one QP, 64-byte RDMA writes one at a time, a block of
32; mode 0 waits with dv.wait_done (one reader), mode 1 with dv.wait_done_watched and three
watchers (an inline copy of dv.cq_watch that stamps when it saw the CQE). Per message:
doorbell rung, CQE seen by a watcher, wait returned (ns from the post's start)."""
import sys
import numpy as np
from numba import int64
from gpuwrite.cudaenv import cuda, SIMULATOR
from gpuwrite import layouts as L
from gpuwrite.device import verbs as dv
from gpuwrite.device.intrinsics import globaltimer_ns, ld_acquire_sys_u32, backoff
from gpuwrite.host.memory import mapped
from gpuwrite.host.verbs import Context

SS = dv.QP_STATE_SHAPE
SI = dv.QP_INFO_SHAPE
TO = 2_000_000_000

@cuda.jit(**({} if SIMULATOR else {"max_registers": 136}))
def diag(Q, src_addr, lkey, dst_addr, rkey, n, mode, delay_first, out):
    tid = cuda.threadIdx.x
    box = cuda.shared.array(4, int64)
    seen = cuda.shared.array(1, int64)
    sh_state = cuda.shared.array(SS, int64)
    sh_info = cuda.shared.array(SI, int64)
    if tid == 0:
        dv.qp_cache_load(Q, 0, sh_state, sh_info)
        dv.watch_reset(box, 0)
        sh_info[0, dv.I_POLL_DELAY_NS] = delay_first
        sh_info[0, dv.I_POLL_ADAPT] = 0
    cuda.syncthreads()
    q = dv.qp_cached(Q, 0, sh_state, sh_info)
    for k in range(n):
        if tid == 0:
            t0 = globaltimer_ns()
            dv.wqe_rdma_write(q, 0, src_addr + 64 * (k % 16), lkey, 64, dst_addr + 64 * (k % 16), rkey, True, 0)
            dv.ring_doorbell(q, 0)
            t1 = globaltimer_ns()
            if mode:
                st = dv.wait_done_watched(q, 0, q[dv.Q_STATE][0, dv.S_PI], TO, box, 0, k)
            else:
                st = dv.wait_done(q, 0, q[dv.Q_STATE][0, dv.S_PI], TO)
            t3 = globaltimer_ns()
            out[k, 0] = t1 - t0
            out[k, 1] = seen[0] - t0
            out[k, 2] = t3 - t0
            out[k, 3] = st
        elif mode and tid <= 3:
            t = dv.watch_begin(box, 0, k, tid, TO)
            if t >= 0:
                info = q[dv.Q_INFO]
                cq = q[dv.Q_CQ][0]
                mask = info[0, dv.I_NCQE] - 1
                lg = info[0, dv.I_LOG_NCQE]
                while globaltimer_ns() < t:
                    pass
                while dv._box(box, dv.WB_GEN) == 2 * k + 1:
                    c = dv._box(box, dv.WB_CI)
                    tail = ld_acquire_sys_u32(cq, (c & mask) * dv._CQE_WORDS + dv._CQE_TAIL)
                    if dv.cqe_ready(tail, c, lg):
                        seen[0] = globaltimer_ns()
                        dv.watch_report(box, 0, c, tail)
                        while dv.watch_still(box, 0, k, c):
                            backoff(32)
        cuda.syncthreads()
    if tid == 0:
        dv.qp_cache_store(Q, 0, sh_state)

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
with Context() as ctx:
    pd = ctx.alloc_pd()
    src = mapped((16 * 16,), np.uint32)
    dst = mapped((16 * 16,), np.uint32)
    smr = pd.reg_mr(src, access=L.ACCESS_LOCAL_WRITE)
    dmr = pd.reg_mr(dst, access=L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE)
    qs = pd.create_queues(1, sq_bbs=64, ncqe=64)
    ctx.start()
    for rep in range(2):
        for mode in (0, 1):
            for delay in (0, 300):
                out = cuda.to_device(np.zeros((n, 4), dtype=np.int64))
                diag[1, 32](qs.device_args, smr.address, smr.lkey, dmr.address, dmr.rkey, n, mode, delay, out)
                cuda.synchronize()
                o = out.copy_to_host()[n // 10:]
                assert (o[:, 3] == 0).all(), o[:, 3]
                med = np.median(o[:, :3], axis=0) / 1e3
                print(f"rep {rep} mode {'watched' if mode else 'one reader'} delay {delay}: doorbell {med[0]:.3f} seen {med[1]:.3f} returned {med[2]:.3f} us", flush=True)
