"""A 64-byte put's steps against the verbs' on the same warp handle (session 24): lane 0
stamps post (``put``, ``_put_by`` without ``put``'s checks, or ``dv.post_small`` and a
shuffle), the doorbell, the completion wait and the warp's barrier, 2000 messages a run;
then the put bench's two latency kernels for comparison. Part A: ``send_messages``' latency
by size (64 B to 4 KiB) with the default pause.
Usage: python3 benchmarks/scripts/put_steps.py [A|B|AB] OUT.json"""
import json, sys, time
import numpy as np
from numba import int64
from gpuwrite.cudaenv import cuda
from gpuwrite.device import api, verbs as dv
from gpuwrite.device.intrinsics import globaltimer_ns
from gpuwrite.paths import runner
from experiments.apps import bench as B, common

SLOT1 = api.slots_shape(1)



MODES = ["put", "verbs", "put_by"]
_K = {}


def kernel(mode):
    if mode in _K:
        return _K[mode]

    @cuda.jit(**api.KERNEL_OPTIONS)
    def k_steps(Q, cfg, src, prm, ts, status):
        sh = cuda.shared.array(SLOT1, int64)
        h = api.open_warp(Q, cfg, 0, sh)
        q = h[1]
        a = h[2]
        nbytes, dst, rkey, lkey, per_qp = B._params(prm)
        words = (nbytes + 3) // 4
        lane0 = cuda.threadIdx.x == 0
        st = api.OK
        m = 0
        while m < per_qp and st == api.OK:
            t0 = globaltimer_ns()
            sw = m * words
            ra = dst + m * words * 4
            if mode == 0:
                st = api.put(h, src, sw, nbytes, ra, rkey, lkey, api.GPU_PUSH)
            elif mode == 1:
                st2 = api.OK
                if lane0:
                    st2 = dv.post_small(q, 0, False, src, sw, nbytes, ra, rkey, True, h[5])
                    a[api.A_SIG_END] = q[dv.Q_STATE][0, dv.S_PI]
                st, w = api._broadcast(a, api.SCOPE_WARP, lane0, st2, 0)
            else:
                st = api._put_by(h, src, sw, nbytes, ra, rkey, lkey, api.GPU_PUSH, False, 0, 0, 0)
            t1 = globaltimer_ns()
            t2 = t1
            t3 = t1
            if st == api.OK:
                st2 = api.OK
                if lane0:
                    api._flush(h)
                    t2 = globaltimer_ns()
                    st2 = dv.wait_done(q, 0, q[dv.Q_STATE][0, dv.S_PI], h[5])
                    a[api.A_STATUS] = st2
                    t3 = globaltimer_ns()
                st, w = api._broadcast(a, api.SCOPE_WARP, lane0, st2, 0)
                api._sync(api.SCOPE_WARP)
            t4 = globaltimer_ns()
            if lane0:
                ts[m, 0] = t1 - t0
                ts[m, 1] = t2 - t1
                ts[m, 2] = t3 - t2
                ts[m, 3] = t4 - t3
                ts[m, 4] = t4 - t0
            m += 1
        api.close(h)
        if lane0:
            status[0] = st

    _K[mode] = k_steps
    return k_steps


def steps(mode, n_msgs=2000, size=64):
    with api.Session(1, thresholds=api.Thresholds.fixed("gpu_push"), **B.SMALL_RINGS) as s:
        payload, src, smr, dst, dmr = B._buffers(s, n_msgs, size)
        ts = cuda.to_device(np.zeros((n_msgs, 5), dtype=np.int64))
        status = cuda.to_device(np.full(1, 99, dtype=np.int64))
        s.start()
        prm = B._prm(dmr, smr, size, n_msgs, 1)
        kernel(mode)[1, 32](s.Q, s.cfg, src, prm, ts, status)
        common.sync()
        t = ts.copy_to_host()[100:]
        return {"post": float(np.median(t[:, 0])), "flush": float(np.median(t[:, 1])),
                "wait": float(np.median(t[:, 2])), "end": float(np.median(t[:, 3])),
                "total": float(np.median(t[:, 4])), "status": int(status.copy_to_host()[0]),
                "delivered": B._delivered(payload, dst, n_msgs)}


if __name__ == "__main__":
    out = {}
    part = sys.argv[1] if len(sys.argv) > 1 else "AB"
    if "B" in part:
        t = time.time()
        res = []
        for r in range(3):
            for mode in range(len(MODES)):
                x = steps(mode)
                x["mode"] = MODES[mode]
                res.append(x)
                print(x, flush=True)
            lp = B.put_latency_run(2000)
            ls = runner.run("gpu_push", [64] * 2000, n_qps=1, wait_each=True, block_threads=32)
            print("put+quiet", lp["p50_us"], "send_messages", ls.latency_p50_us, flush=True)
            res.append({"mode": "put_latency_run", "p50": lp["p50_us"]})
            res.append({"mode": "send_messages", "p50": ls.latency_p50_us})
        out["B"] = res
        print("B took", time.time() - t, flush=True)

    if "A" in part:
        t = time.time()
        rows = []
        for rep in range(2):
            for th in (32, 256):
                for size in (64, 80, 128, 192, 256, 384, 512, 768, 1024, 2048, 2064, 4096):
                    for pause in (300,):  # the default pause
                        r = runner.run("gpu_push", [size] * 600, n_qps=1, wait_each=True,
                                       block_threads=th, poll_delay_ns=pause)
                        rows.append((rep, th, size, pause, r.latency_p50_us))
                        print(rep, th, size, pause, round(r.latency_p50_us, 2), flush=True)
        out["A"] = rows
        print("A took", time.time() - t, flush=True)
    json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "diag.json", "w"))
