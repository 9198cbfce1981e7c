"""Session 40: which of send_messages' own steps puts 0.35 to 0.45 us on a 64-byte push.

Measured first (``latency_gap_diag.py``, H200): the breakdown kernel's round trip (the same
verbs in push_small's order on one thread, stamped between steps) 2.82 to 2.98 us; the
64-byte gpu_push through ``runner.run`` 3.26 to 3.46 in the same rounds, with its payload
as uploaded, evicted from L2 or read from one of 64 hot lines alike. So the time is not
the payload's source. Here, kernels with send_messages' loop for one-thread pushes (its
message table, its stamps, its pend ring and ``_reap``, its end-of-message barrier), each
piece removable, stamped at the post's start (t0), after ``post_small`` (t1), after the
doorbell (t2) and after the wait (t3); 64-byte gpu_push, one in flight, a block of 32:

  full      the loop as send_messages runs it
  no_reap   t_done stamped after the wait, no pend ring, no ``_reap``
  no_bar    lanes 1 to 31 leave at once (no end-of-message barrier)
  bare      neither (the breakdown's shape, with the message table)

beside ``runner.run`` (the real kernel) and the breakdown. Medians of 2000 per row.
Usage: python3 benchmarks/scripts/send_gap_diag.py OUT.jsonl [rounds]
"""
import os
import sys

import numpy as np
from _ab import emit

from gpuwrite import layouts as L
from gpuwrite.bench.breakdown import push_breakdown
from gpuwrite.cudaenv import cuda
from gpuwrite.device import verbs as dv
from gpuwrite.device.intrinsics import globaltimer_ns
from gpuwrite.host.memory import mapped
from gpuwrite.host.verbs import Context
from gpuwrite.paths import kernels as K, runner

N = int(os.environ.get("DIAG_N", 2000))
QP_STATE_SHAPE = dv.QP_STATE_SHAPE
QP_INFO_SHAPE = dv.QP_INFO_SHAPE
_reap = K._reap


def make(reap: bool, barrier: bool):
    @cuda.jit(**K._LIMITS)
    def send(Q, msgs, src, params, t_post, t_done, stamps, pend, result):
        tid = cuda.threadIdx.x
        sh = cuda.shared.array(4, dtype=np.int64)
        sh_state = cuda.shared.array(QP_STATE_SHAPE, dtype=np.int64)
        sh_info = cuda.shared.array(QP_INFO_SHAPE, dtype=np.int64)
        if tid == 0:
            dv.qp_cache_load(Q, 0, sh_state, sh_info)
        cuda.syncthreads()
        q = dv.qp_cached(Q, 0, sh_state, sh_info)
        timeout = params[K.P_TIMEOUT_NS]
        dst_addr = params[K.P_DST_ADDR]
        rkey = params[K.P_RKEY]
        if not barrier and tid != 0:
            return
        state = q[dv.Q_STATE]
        cap = pend.shape[1]
        head = 0
        tail = 0
        status = 0
        m = 0
        n = msgs.shape[0]
        while m < n and status == 0:
            size = msgs[m, K.M_SIZE]
            src0 = msgs[m, K.M_SRC_WORD]
            dst0 = msgs[m, K.M_DST_OFF]
            if tid == 0 and (size | src0 | dst0) >= 0:
                t_post[m] = globaltimer_ns()
            if tid == 0:
                st = dv.post_small(q, 0, False, src, src0, size, dst_addr + dst0, rkey, True,
                                   timeout)
                stamps[m, 0] = globaltimer_ns()
                if st == 0:
                    dv.flush_doorbell(q, 0)
                    stamps[m, 1] = globaltimer_ns()
                    if reap:
                        slot = tail & (cap - 1)
                        pend[0, slot, 0] = state[0, dv.S_PI]
                        pend[0, slot, 1] = m
                        pend[0, slot, 2] = m + 1
                        tail += 1
                    st = dv.wait_done(q, 0, state[0, dv.S_PI], timeout)
                    stamps[m, 2] = globaltimer_ns()
                    if reap:
                        head = _reap(q, pend, 0, t_done, head, tail)
                    else:
                        t_done[m] = globaltimer_ns()
                status = st
            if barrier:
                if tid == 0:
                    sh[2 + (m & 1)] = status
                cuda.syncthreads()
                status = sh[2 + (m & 1)]
            m += 1
        if tid == 0:
            result[0] = status
            dv.qp_cache_store(Q, 0, sh_state)

    return send


VARIANTS = {"full": make(True, True), "no_reap": make(False, True),
            "no_bar": make(True, False), "bare": make(False, False)}


def run_variant(name):
    msgs = np.stack([np.full(N, 64), np.arange(N) * 16, np.arange(N) * 64], axis=1).astype(np.int64)
    with Context() as ctx:
        pd = ctx.alloc_pd()
        dst = mapped((N * 16,), np.uint32)
        dmr = pd.reg_mr(dst, access=L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE)
        qs = pd.create_queues(1, sq_bbs=256, ncqe=256, stage_slots=64, stage_slot_bytes=256)
        src_host = np.arange(N * 16, dtype=np.uint32)
        src = cuda.to_device(src_host)
        params = np.zeros(K.P_COLS, dtype=np.int64)
        params[K.P_TIMEOUT_NS] = 2_000_000_000
        params[K.P_DST_ADDR] = dmr.address
        params[K.P_RKEY] = dmr.rkey
        t_post = cuda.to_device(np.zeros(N, np.int64))
        t_done = cuda.to_device(np.zeros(N, np.int64))
        stamps = cuda.to_device(np.zeros((N, 3), np.int64))
        pend = cuda.to_device(np.zeros((1, 128, 3), np.int64))
        result = cuda.to_device(np.zeros(1, np.int64))
        ctx.start()
        VARIANTS[name][1, 32](qs.device_args, cuda.to_device(msgs), src, cuda.to_device(params),
                              t_post, t_done, stamps, pend, result)
        cuda.synchronize()
        st = int(result.copy_to_host()[0])
        ok = bool((dst.host == src_host).all())
    tp, td, s = t_post.copy_to_host(), t_done.copy_to_host(), stamps.copy_to_host()
    k = slice(N // 10, None)
    med = lambda a: round(float(np.median(a[k])) / 1e3, 3)
    return dict(status=st, delivered=ok, p50=med(td - tp), post=med(s[:, 0] - tp),
                doorbell=med(s[:, 1] - s[:, 0]), wait=med(s[:, 2] - s[:, 1]),
                after=med(td - s[:, 2]))


def main(argv):
    rounds = int(argv[1]) if len(argv) > 1 else 3
    for name in VARIANTS:
        run_variant(name)
    runner.run("gpu_push", [64] * 50, n_qps=1, wait_each=True, block_threads=32)
    with open(argv[0], "w") as out:
        for rnd in range(rounds):
            names = list(VARIANTS)
            names = names[rnd % len(names):] + names[:rnd % len(names)]
            for name in names:
                emit(out, round=rnd, v=name, **run_variant(name))
            r = runner.run("gpu_push", [64] * N, n_qps=1, wait_each=True, block_threads=32)
            emit(out, round=rnd, v="runner", p50=round(r.latency_p50_us, 3))
            b = push_breakdown(N)
            emit(out, round=rnd, v="breakdown", p50=round(b["total"] / 1e3, 3),
                 doorbell=b["doorbell"], completion=b["completion"])


if __name__ == "__main__":
    main(sys.argv[1:])
