"""Runs a workload through one data path in emulated mode and checks every byte.

``run(path, sizes_bytes, ...)`` builds a NIC context, queues and buffers, launches
:func:`gpuwrite.paths.kernels.send_messages_for` the path (``send_messages`` with the path
a compile-time constant), and compares each delivered message with
what was sent. The result says what happened to every message: delivered (bytes equal),
failed (an error completion, with its syndrome), or never completed.
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field

import numpy as np

from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR, cuda, preload
from gpuwrite.device import verbs as dv
from gpuwrite.host.memory import evict_l2, mapped
from gpuwrite.host.verbs import DEFAULT_POLL_DELAY_NS, DEFAULT_STAGE_CREDITS, Context, LinkConfig
from gpuwrite.paths import kernels as K
from gpuwrite.paths import workload
from gpuwrite.paths.pull_agent import PULL_AGENTS, PullAgent

# Where a run's kernel finds its uploaded source (``run(source_l2=...)``).
SOURCE_L2 = ("as_uploaded", "evicted")

PATHS = tuple(K.PATH_IDS)

# What emulation substitutes for hardware, per path: printed with every result.
EMULATION_NOTES = {
    "gpu_push": "staging region = pinned host memory mapped into the GPU, standing in for "
                "NIC memory",
    "gpu_push_inline": "WQE ring in pinned host memory; the payload travels inside the WQE",
    "nic_pull": "GPU-resident pull agent standing in for a NIC DMA read: the engine posts a "
                "read request into mapped host memory, persistent GPU blocks poll it and "
                "write the bytes back with 16-byte stores (a CPU thread cannot issue a PCIe "
                "read of GPU memory)",
    "host_staged": "GPU copies to a pinned host bounce ring; the engine delivers from it with "
                   "the host-memory copy that delivers gpu_push's staging, so the NIC's DMA "
                   "read of the ring (host_staged's second PCIe crossing) costs no time of "
                   "its own here (the model counts it)",
}


@dataclass
class PathResult:
    """What one run of one path did, message by message and in summary."""

    path: str
    messages: int
    delivered: int
    dropped: int
    errors: int
    bytes: int
    latency_p50_us: float
    latency_p99_us: float
    throughput_gbps: float
    world: str
    emulation: str
    qp_errors: dict = field(default_factory=dict)
    counters: dict = field(default_factory=dict)
    latencies_ns: np.ndarray | None = None
    # The CPU of each engine thread, workers first (Context.thread_cpus); [] unpinned.
    engine_cpus: list = field(default_factory=list)
    # Which send_messages posted the messages (kernels.kernel_scope): "thread" (thread 0
    # alone, the block's other threads gone) or "block"; "" where no gpuwrite kernel did.
    kernel: str = ""

    def row(self) -> dict:
        d = asdict(self)
        d.pop("latencies_ns")
        return d


# nic_pull with pull_agent="copy_engine": the stand-in before the agent.
COPY_ENGINE_NOTE = ("copy-engine stand-in for a NIC DMA read: the engine pulls GPU memory with "
                    "cuMemcpyDtoHAsync plus a stream wait per pull, about 9 us of host-side "
                    "cost on an H100 (a CPU thread cannot issue a PCIe read of GPU memory)")

SIMULATOR_PULL_NOTE = ("CUDA simulator: 'GPU memory' is host memory and the engine pulls it "
                       "with memcpy")


def emulation_note(path: str, pull_agent: str = "gpu") -> str:
    """What stands in for hardware on ``path`` (printed with every result)."""
    if path == "nic_pull" and pull_agent == "copy_engine":
        return SIMULATOR_PULL_NOTE if SIMULATOR else COPY_ENGINE_NOTE
    return EMULATION_NOTES[path]


DEMO_SIZES = (64, 256, 1024, 4096, 16384, 65536)
INLINE_SIZES = (16, 64, 128, 256, 448)


def default_sizes(path: str, n: int, seed: int = 1, choices=None) -> np.ndarray:
    """A mixed-size workload drawn from ``choices`` (by default ``DEMO_SIZES``, and
    ``INLINE_SIZES`` for inline paths, which must fit a WQE)."""
    rng = np.random.default_rng(seed)
    if choices is None:
        choices = INLINE_SIZES if path == "gpu_push_inline" else DEMO_SIZES
    return rng.choice(np.asarray(choices, dtype=np.int64), size=n)


def decode_qp_errors(result: np.ndarray, qpns, vendor: bool = False) -> dict:
    """The kernel's per-QP outcome rows (``send_messages``' ``result``) as named errors,
    keyed by QP number; QPs that finished cleanly are left out. The low byte of the
    syndrome word is the emulated engine's reason, or on a real NIC (``vendor``) the
    vendor syndrome."""
    errors = {}
    for q in range(len(qpns)):
        status = int(result[q, K.R_STATUS])
        if status == 0:
            continue
        synd = int(result[q, K.R_SYND])
        low = (f"0x{synd & 0xFF:02x}" if vendor else L.reason_name(synd & 0xFF)) if synd else ""
        errors[int(qpns[q])] = {
            "status": dv.ERROR_NAMES.get(status, str(status)),
            "syndrome": L.syndrome_name(synd >> 8) if synd else "",
            "vendor_syndrome" if vendor else "reason": low,
            "messages_sent": int(result[q, K.R_SENT]),
        }
    return errors


def _validate_run(batch, chunk_bytes, sq_bbs, block_threads=None):
    if block_threads is not None and not 1 <= block_threads <= K.MAX_BLOCK_THREADS:
        raise ValueError(f"block_threads={block_threads}: allowed 1 to {K.MAX_BLOCK_THREADS} "
                         "(the sending kernel's registers)")
    if not 1 <= batch <= sq_bbs // (2 * L.MAX_WQE_BBS):
        raise ValueError(f"batch={batch}: allowed 1 to {sq_bbs // (2 * L.MAX_WQE_BBS)} "
                         f"(sq_bbs={sq_bbs} / 16, so a signaled WQE is always in flight)")
    if chunk_bytes % 4 or chunk_bytes < 64:
        raise ValueError(f"chunk_bytes={chunk_bytes}: a multiple of 4 (chunks start on a "
                         "source word), at least 64")


def run(path: str, sizes_bytes, n_qps: int = 4, *, policy: str = "hold",
        link: LinkConfig | None = None, batch: int = 1, wait_each: bool = False,
        chunk_bytes: int = 65536, sq_bbs: int = 256, stage_slots: int | None = None,
        stage_slot_bytes: int = 256, block_threads: int | None = None, timeout_s: float = 5.0,
        workers: int | None = None, seed: int = 7, stall_receiver_s: float = 0.0,
        stage_credits: str = DEFAULT_STAGE_CREDITS, poll_delay_ns: int = DEFAULT_POLL_DELAY_NS,
        poll_adapt: bool = True,
        bounce_bytes: int | None = None, context: Context | None = None,
        pull_agent: str | None = None, pull_timeout_s: float = 1.0,
        source_l2: str = "as_uploaded", around_kernel=None) -> PathResult:
    """Sends ``sizes_bytes`` messages (spread round-robin over ``n_qps`` QPs) on ``path``.

    The payload source is uploaded to GPU memory just before the kernel; ``source_l2``
    says where the kernel then finds it: ``"as_uploaded"`` (the default: whatever part of
    it the upload left in L2) or ``"evicted"`` (L2 written over first, so that every
    message reads HBM, as the bench's copy ceilings do; ``gpuwrite.host.memory.evict_l2``).

    ``around_kernel``: a callable returning a context manager that is entered just before
    the sending kernel's launch and left once it has finished (the span its timestamps
    fall in, without the context's set-up or the byte check): the bench samples what the
    host did over it (``gpuwrite.bench.hostload.watched_run``).

    gpu_push counts its staging credits from completions, as it must on a real NIC
    (``stage_credits="completions"``, the default); ``"status"`` reads them from a counter
    the emulated NIC publishes (``gpuwrite.host.verbs.STAGE_CREDITS``);
    ``workers`` engine threads run the context this makes (default 1); a ``context``
    given runs its own, and another ``workers`` is an error. ``poll_delay_ns`` is the pause
    before a completion wait's first poll (where it starts, with ``poll_adapt``, the
    default; ``QueueSet``)
    (``gpuwrite.device.verbs.I_POLL_DELAY_NS``; default
    ``gpuwrite.host.verbs.DEFAULT_POLL_DELAY_NS``). host_staged's bounce ring holds
    ``bounce_bytes`` per QP (default: four of the largest WQE's payload, at least 64 KiB).
    nic_pull's reads of GPU memory are answered by ``pull_agent``: ``"gpu"`` (persistent
    GPU blocks, :mod:`gpuwrite.paths.pull_agent`; a pull it leaves unanswered for
    ``pull_timeout_s`` fails with reason ``pull_failed``; the default on a GPU, whatever
    the engine's workers) or ``"copy_engine"`` (the default on the simulator, where it is
    a memcpy). With 32 QPs the agent moved 4 KiB pulls at 22 to 27 Gb/s and 64 KiB pulls at
    154 to 205 Gb/s against the copy engine's 10 to 14 and 93 to 134, with one engine
    worker or eight (H100, BENCHMARKS.md, session 13).
    """
    if pull_agent is None:
        pull_agent = "copy_engine" if SIMULATOR else "gpu"
    if pull_agent not in PULL_AGENTS:
        raise ValueError(f"pull_agent={pull_agent!r}: allowed {', '.join(PULL_AGENTS)}")
    if source_l2 not in SOURCE_L2:
        raise ValueError(f"source_l2={source_l2!r}: allowed {', '.join(SOURCE_L2)}")
    wl = workload.build(path, sizes_bytes, n_qps, seed)
    _validate_run(batch, chunk_bytes, sq_bbs, block_threads)
    sizes, msgs, src_host = wl.sizes, wl.msgs, wl.payload
    n = len(sizes)
    qp_first = wl.qp_first(n_qps)

    max_chunk = min(chunk_bytes, int(sizes.max()))
    if stage_slots is None:
        stage_slots = max(64, 4 * L.stage_slots_needed(max_chunk, stage_slot_bytes))
    threads = block_threads or (4 if SIMULATOR else 128)
    own_ctx = context is None
    if context is not None and workers is not None and workers != context.workers:
        raise ValueError(f"workers={workers}: the context given runs {context.workers} engine "
                         "thread(s), set when it was made (Context(workers=...))")
    ctx = context or Context(policy=policy, link=link, workers=1 if workers is None else workers)
    agent = None
    pd = qs = None
    try:
        pd = ctx.alloc_pd()
        src_dev = cuda.to_device(src_host)
        src_mr = pd.reg_mr(src_dev, access=L.ACCESS_LOCAL_WRITE)
        dst = mapped((len(src_host),), np.uint32)
        dst.host[:] = wl.destination()
        dst_mr = pd.reg_mr(dst, access=L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE)
        qs = pd.create_queues(n_qps, sq_bbs=sq_bbs, ncqe=max(sq_bbs, 256), stage_slots=stage_slots,
                              stage_slot_bytes=stage_slot_bytes,
                              bounce_bytes=bounce_bytes or max(-(-4 * max_chunk // 16) * 16, 65536),
                              stage_credits=stage_credits, poll_delay_ns=poll_delay_ns,
                              poll_adapt=poll_adapt)
        params = np.zeros(K.P_COLS, dtype=np.int64)
        params[K.P_BATCH] = batch
        params[K.P_TIMEOUT_NS] = int(timeout_s * 1e9)
        params[K.P_CHUNK_BYTES] = chunk_bytes
        params[K.P_DST_ADDR] = dst_mr.address
        params[K.P_RKEY] = dst_mr.rkey
        params[K.P_SRC_ADDR] = src_mr.address
        params[K.P_SRC_LKEY] = src_mr.lkey
        params[K.P_WAIT_EACH] = int(wait_each)
        t_post = cuda.to_device(np.zeros(n, dtype=np.int64))
        t_done = cuda.to_device(np.zeros(n, dtype=np.int64))
        result = cuda.to_device(np.zeros((n_qps, 3), dtype=np.int64))
        pend = cuda.to_device(np.zeros((n_qps, max(4, sq_bbs // 2), 3), dtype=np.int64))
        d_msgs = cuda.to_device(msgs)
        d_first = cuda.to_device(qp_first)
        d_params = cuda.to_device(params)
        send_args = (qs.device_args, d_msgs, d_first, src_dev, d_params, t_post, t_done, result,
                     pend)
        if source_l2 == "evicted":
            evict_l2()            # before the agent's persistent kernel starts
        # The narrower kernel that posts every message of the table: a table of messages
        # thread 0 posts alone goes to the kernel whose other threads leave at once and that
        # takes no barrier per message (kernels.kernel_scope).
        scope, kernel = K.kernel_for(path, msgs, src_mr.address, chunk_bytes)
        if path == "nic_pull" and pull_agent == "gpu":
            preload(kernel, *send_args)
            agent = PullAgent(ctx, pull_timeout_s=pull_timeout_s)
        with agent if agent is not None else contextlib.nullcontext():
            if not ctx.running:
                ctx.start()
            timer = None
            if stall_receiver_s > 0:
                # The receiver stalls from before the first message; the stall ends
                # stall_receiver_s after the kernel starts (on a GPU the launch returns once
                # the kernel is compiled and queued; the simulator runs it inside the call).
                import threading
                ctx.stall_receiver(True)
                timer = threading.Timer(stall_receiver_s, ctx.stall_receiver, args=(False,))
                if SIMULATOR:
                    timer.start()
            with around_kernel() if around_kernel is not None else contextlib.nullcontext():
                kernel[n_qps, threads](*send_args)
                if timer is not None and not SIMULATOR:
                    timer.start()
                # The legacy default stream only: the agent's kernel runs on a stream of its
                # own until it is stopped, and a whole-device synchronize would wait for it.
                cuda.synchronize() if SIMULATOR else cuda.default_stream().synchronize()
        agent_report = agent.report if agent is not None else None
        counters = ctx.counters()
        tp = t_post.copy_to_host()
        td = t_done.copy_to_host()
        res = result.copy_to_host()
        got = dst.host.copy()
        qp_errors = decode_qp_errors(res, qs.qpns)
        completed = td > 0
        arrived = wl.arrived(got)
        delivered_mask = completed & arrived
        lat = (td[completed] - tp[completed]).astype(np.int64)
        span = (td[completed].max() - tp.min()) if completed.any() else 0
        nbytes = int(sizes[delivered_mask].sum())
        out = PathResult(
            path=path, messages=n, delivered=int(delivered_mask.sum()),
            dropped=int(counters["dropped_msgs"]), errors=int(counters["error_cqes"]),
            bytes=nbytes,
            latency_p50_us=float(np.percentile(lat, 50) / 1e3) if len(lat) else float("nan"),
            latency_p99_us=float(np.percentile(lat, 99) / 1e3) if len(lat) else float("nan"),
            throughput_gbps=float(nbytes * 8 / span) if span > 0 else 0.0,
            world="simulator" if SIMULATOR else "gpu",
            emulation=emulation_note(path, pull_agent),
            qp_errors=qp_errors, counters=counters, latencies_ns=lat,
            engine_cpus=list(ctx.thread_cpus), kernel=scope)
        if agent_report is not None:
            out.counters["pull_agent"] = agent_report
        # Messages tile dst, so no byte lies outside every message's range: a message
        # that never completed must have left its range whole or untouched.
        for m in np.nonzero(~completed)[0]:
            if not arrived[m] and not wl.untouched(got, m):
                out.qp_errors.setdefault("partial", []).append(int(m))
        return out
    finally:
        if own_ctx:
            ctx.stop()
            ctx.close()
        else:
            # The caller's context lives on: without this each run left its QPs polled by
            # the engine, its CQ numbers taken and its buffers pinned. The results are
            # copies by now. Last pushed runs first, even where the other raised.
            with contextlib.ExitStack() as release:
                if pd is not None:
                    release.callback(pd.close)
                if qs is not None:
                    release.callback(qs.close)

