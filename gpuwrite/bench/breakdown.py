"""Where the gpu_push latency goes: one 64-byte push at a time, timed step by step.

``gpuwrite bench`` runs a kernel that pushes one message, waits for its completion, and
stamps ``%globaltimer`` between the steps the device verbs take, in the order
``push_small`` takes them (a 64-byte payload is pushed by one thread). The medians say
which step separates gpu_push from the doorbell ping-pong floor:

  sq         send-queue space
  stage      staging-slot reservation
  header     the staging header (one 16-byte store)
  wqe        the WQE (four 16-byte stores into the send queue)
  payload    the payload (16-byte loads from GPU memory, issued first, and stores)
  doorbell   doorbell record (system-scope release: waits for the writes above) and
             doorbell register
  completion from the doorbell until the kernel has consumed the completion; of it,
             ``engine_turnaround`` is the emulated NIC's time from seeing the doorbell
             record advance to writing the CQE (the engine's clock, a mean)

The stamps cost a little each and keep the steps from overlapping, so the sum is larger
than a push measured whole.
"""
from __future__ import annotations

import numpy as np

from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device import verbs as dv
from gpuwrite.device.intrinsics import globaltimer_ns
from gpuwrite.host.memory import mapped
from gpuwrite.host.verbs import DEFAULT_POLL_DELAY_NS, Context
from gpuwrite.kernel_cache import cached

STEPS = ("sq", "stage", "header", "wqe", "payload", "doorbell", "completion")
# Bound here as globals: cuda.shared.array needs shapes Numba sees as constants, and
# a module attribute (dv.QP_STATE_SHAPE) inside the kernel is not one.
QP_STATE_SHAPE = dv.QP_STATE_SHAPE
QP_INFO_SHAPE = dv.QP_INFO_SHAPE


@cached
@cuda.jit
def _push_steps(Q, src, nbytes, raddr, rkey, timeout_ns, stamps, status):
    # dv.push_small's steps, in its order, on the same shared-memory QP state as the
    # send_messages kernel; 64-byte payloads (four 16-byte words).
    sh_state = cuda.shared.array(QP_STATE_SHAPE, dtype=np.int64)
    sh_info = cuda.shared.array(QP_INFO_SHAPE, dtype=np.int64)
    if cuda.threadIdx.x != 0:
        return
    dv.qp_cache_load(Q, 0, sh_state, sh_info)
    q = dv.qp_cached(Q, 0, sh_state, sh_info)
    st = 0
    for k in range(stamps.shape[0]):
        stamps[k, 0] = globaltimer_ns()
        payload = dv._load64(src, 0, 4)
        st = dv.sq_reserve(q, 0, 1, timeout_ns)
        stamps[k, 1] = globaltimer_ns()
        if st != 0:
            break
        st, first, slots = dv.stage_reserve(q, 0, nbytes, timeout_ns)
        stamps[k, 2] = globaltimer_ns()
        if st != 0:
            break
        stage = q[dv.Q_STAGE][0]
        word = dv.stage_header(q, 0, first, nbytes, slots, sh_state[0, dv.S_PI])
        stamps[k, 3] = globaltimer_ns()
        dv.wqe_rdma_write(q, 0, dv.stage_address(q, 0, word), sh_info[0, dv.I_STAGE_LKEY],
                          nbytes, raddr, rkey, dv.stage_signal(q, 0, True), dv.stage_aux(q, 0))
        stamps[k, 4] = globaltimer_ns()
        dv._store64(stage, word, payload, 4)
        stamps[k, 5] = globaltimer_ns()
        dv.ring_doorbell(q, 0)
        stamps[k, 6] = globaltimer_ns()
        st = dv.wait_done(q, 0, sh_state[0, dv.S_PI], timeout_ns)
        stamps[k, 7] = globaltimer_ns()
        if st != 0:
            break
    status[0] = st
    dv.qp_cache_store(Q, 0, sh_state)


def push_breakdown(iters: int = 2000, block_threads: int = 32,
                   poll_delay_ns: int = DEFAULT_POLL_DELAY_NS) -> dict:
    """Median nanoseconds of each step of a one-at-a-time 64-byte gpu_push; the sum of
    sq, stage and header is also given as ``reserve``."""
    nbytes = 64
    if SIMULATOR:
        raise RuntimeError("the latency breakdown times a real GPU; none was found")
    with Context() as ctx:
        pd = ctx.alloc_pd()
        dst = mapped((max(nbytes // 4, 16),), np.uint32)
        dst_mr = pd.reg_mr(dst, access=L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE)
        slot_bytes = 256
        qs = pd.create_queues(1, sq_bbs=256, ncqe=256,
                              stage_slots=max(64, 4 * L.stage_slots_needed(nbytes, slot_bytes)),
                              stage_slot_bytes=slot_bytes, poll_delay_ns=poll_delay_ns)
        src = cuda.to_device(np.arange(max(nbytes // 4, 1), dtype=np.uint32))
        stamps = cuda.to_device(np.zeros((iters, len(STEPS) + 1), dtype=np.int64))
        status = cuda.to_device(np.zeros(1, dtype=np.int64))
        ctx.start()
        _push_steps[1, block_threads](qs.device_args, src, nbytes, dst_mr.address, dst_mr.rkey,
                                      2_000_000_000, stamps, status)
        cuda.synchronize()
        st = int(status.copy_to_host()[0])
        c = ctx.counters()
        if st != 0:
            raise RuntimeError(f"breakdown kernel failed: {dv.ERROR_NAMES.get(st, st)}")
        ts = stamps.copy_to_host()[iters // 10:]
    steps = np.diff(ts, axis=1)
    out = {name: float(np.median(steps[:, j])) for j, name in enumerate(STEPS)}
    out["reserve"] = float(np.median(ts[:, 3] - ts[:, 0]))
    out["total"] = float(np.median(ts[:, -1] - ts[:, 0]))
    # Inside "completion": the engine's own share, from the doorbell record's advance
    # seen to the CQE written (a mean over every message, warm-up included).
    out["engine_turnaround"] = c["turnaround_ns"] / max(c["turnarounds"], 1)
    return out
