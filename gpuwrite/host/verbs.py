"""Host verbs of the emulated NIC: context, protection domain, memory regions, queues.

The shapes follow ibverbs (and pyverbs): a :class:`Context` is an opened NIC (here the
software engine), a :class:`ProtectionDomain` groups memory regions and queues, a
:class:`MemoryRegion` has an lkey/rkey, bounds and access flags, and a :class:`QueueSet`
holds queue pairs with their completion queues, in GPU-visible memory, and hands
kernels the handles they need (``QueueSet.device_args``). Each is a context manager
and releases what it holds.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass

import numpy as np

from gpuwrite import layouts as L
from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device import verbs as dv
from gpuwrite.host.memory import describe, device_zeros, mapped

POLICIES = {"hold": L.POLICY_HOLD, "drop": L.POLICY_DROP}
_ERRLEN = 256


class VerbsError(RuntimeError):
    """A host verb failed; the message says which value was wrong and what is allowed."""


def _check(rc: int, err) -> None:
    if rc != 0:
        raise VerbsError(ffi.string(err).decode())


def _pow2(name: str, value: int, low: int, high: int) -> int:
    if not (low <= value <= high) or value & (value - 1):
        raise ValueError(f"{name}={value}: must be a power of two from {low} to {high}")
    return value


@dataclass(frozen=True)
class LinkConfig:
    """The modelled network link behind the NIC.

    ``rate_gbps=0`` means an unlimited link (no link model: messages are delivered as
    fast as the engine moves them). With a rate, the link sends MTU-sized packets, each
    taking ``ceil(bytes/64)`` credit blocks of the receiver's buffer (InfiniBand
    link-level flow control); the receiver drains at ``drain_gbps`` (default: the link
    rate) unless stalled, and drained blocks return as credits ``credit_latency_ns`` later.
    """

    rate_gbps: float = 0.0
    mtu_bytes: int = 4096
    rx_credits: int = 0
    credit_latency_ns: int = 1000
    drain_gbps: float = 0.0

    def __post_init__(self):
        if self.rate_gbps < 0:
            raise ValueError(f"rate_gbps={self.rate_gbps}: must be >= 0 (0 means unlimited)")
        if self.drain_gbps < 0:
            raise ValueError(f"drain_gbps={self.drain_gbps}: must be >= 0 (0: the link rate)")
        if self.mtu_bytes not in (256, 512, 1024, 2048, 4096):
            raise ValueError(f"mtu_bytes={self.mtu_bytes}: allowed 256, 512, 1024, 2048, 4096 "
                             "(InfiniBand MTUs)")
        if self.rx_credits < 0 or self.credit_latency_ns < 0:
            raise ValueError(f"rx_credits={self.rx_credits}, credit_latency_ns="
                             f"{self.credit_latency_ns}: both must be >= 0")
        if self.rx_credits and self.rx_credits * L.CREDIT_BLOCK_BYTES < self.mtu_bytes:
            raise ValueError(f"rx_credits={self.rx_credits} blocks of 64 bytes cannot hold one "
                             f"{self.mtu_bytes}-byte packet: need at least "
                             f"{self.mtu_bytes // L.CREDIT_BLOCK_BYTES}")


def _cuda_context_handle() -> int:
    handle = cuda.current_context().handle
    for conv in (int, lambda h: h.value, lambda h: int(h.getPtr())):
        try:
            value = conv(handle)
            if value:
                return value
        except (TypeError, AttributeError, ValueError):
            continue
    raise VerbsError(f"cannot read the CUDA context handle from {handle!r}")


class Context:
    """An opened NIC: the software engine of emulated mode.

    ``policy`` is ``"hold"`` (pushed data waits in the staging region for link credits;
    the GPU is back-pressured through staging credits, so nothing is lost) or ``"drop"``
    (the naive design: pushed data that finds no credits is dropped and counted).
    ``workers`` engine threads share the QPs (by CQ); a modelled link needs one.
    """

    def __init__(self, policy: str = "hold", link: LinkConfig | None = None, workers: int = 1,
                 max_qps: int = 4096, max_mrs: int = 4096, idle_sleep_ns: int = 0):
        if policy not in POLICIES:
            raise ValueError(f"policy={policy!r}: allowed {sorted(POLICIES)}")
        self.policy = policy
        self.link = link or LinkConfig()
        self.workers = workers
        cfg = ffi.new("struct gw_engine_config *")
        cfg.policy = POLICIES[policy]
        cfg.workers = workers
        cfg.max_qps = max_qps
        cfg.max_cqs = max_qps
        cfg.max_mrs = max_mrs
        cfg.idle_sleep_ns = idle_sleep_ns
        for key, value in asdict(self.link).items():
            setattr(cfg.link, key, value)
        self._libcuda = ffi.new("char[]", b"libcuda.so.1")
        if not SIMULATOR:
            cfg.cuda_context = ffi.cast("void *", _cuda_context_handle())
            cfg.libcuda_path = self._libcuda
        err = ffi.new("char[]", _ERRLEN)
        self._engine = lib.gw_engine_create(cfg, err, _ERRLEN)
        if self._engine == ffi.NULL:
            raise VerbsError(ffi.string(err).decode())
        self._max_mrs = max_mrs
        self._mr_index = itertools.count(1)
        self._qpn = itertools.count(0x100)
        self._cqn = itertools.count(1)
        self._rng = random.Random(0x6777)
        self._keep = []          # buffers the engine points at stay alive with the context
        self.max_qps = max_qps

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> "Context":
        err = ffi.new("char[]", _ERRLEN)
        _check(lib.gw_engine_start(self._engine, err, _ERRLEN), err)
        return self

    def stop(self) -> None:
        if self._engine is not None:
            lib.gw_engine_stop(self._engine)

    @property
    def running(self) -> bool:
        return bool(lib.gw_engine_running(self._engine))

    def poll(self, passes: int = 1) -> bool:
        """Runs engine passes in this thread (engine not started): for tests."""
        rc = lib.gw_engine_poll(self._engine, passes)
        if rc < 0:
            raise VerbsError("poll() needs a stopped engine; this one is running")
        return bool(rc)

    def close(self) -> None:
        if self._engine is not None:
            lib.gw_engine_destroy(self._engine)
            self._engine = None
            self._keep.clear()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- observation and control -------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """Every engine counter, read now (see struct gw_counters in csrc/gw_engine.h)."""
        c = ffi.new("struct gw_counters *")
        lib.gw_engine_read_counters(self._engine, c)
        return {name: int(getattr(c, name)) for name in L.COUNTERS.names}

    def stall_receiver(self, stalled: bool = True) -> None:
        """Stops (or resumes) the remote receiver draining the link's buffer."""
        lib.gw_engine_set_receiver_stall(self._engine, 1 if stalled else 0)

    def alloc_pd(self) -> "ProtectionDomain":
        return ProtectionDomain(self)

    # -- internals used by PD and QueueSet ----------------------------------------------
    def _new_key(self) -> int:
        index = next(self._mr_index)
        if index >= self._max_mrs:
            raise VerbsError(f"out of memory-region keys: max_mrs={self._max_mrs}")
        return index << 8 | self._rng.randrange(256)


class MemoryRegion:
    """A registered buffer: [address, address + length) with keys and access rights."""

    def __init__(self, pd: "ProtectionDomain", buffer, access: int, kind: int | None = None):
        addr, nbytes, detected = describe(buffer)
        self.buffer = buffer
        self.address = addr
        self.length = nbytes
        self.access = access
        self.kind = detected if kind is None else kind
        self.key = pd.context._new_key()
        self._pd = pd
        err = ffi.new("char[]", _ERRLEN)
        _check(lib.gw_engine_add_mr(pd.context._engine, self.key, addr, nbytes, access, self.kind,
                                    err, _ERRLEN), err)

    @property
    def lkey(self) -> int:
        return self.key

    @property
    def rkey(self) -> int:
        return self.key

    def deregister(self) -> None:
        if self._pd is not None and self._pd.context._engine is not None:
            lib.gw_engine_remove_mr(self._pd.context._engine, self.key)
        self._pd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.deregister()


class ProtectionDomain:
    """Groups the memory regions and queues of one user of the NIC."""

    def __init__(self, context: Context):
        self.context = context
        self.mrs: list[MemoryRegion] = []

    def reg_mr(self, buffer, access: int = L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE,
               kind: int | None = None) -> MemoryRegion:
        """Registers a buffer (numpy, mapped, CuPy, anything with __cuda_array_interface__)."""
        mr = MemoryRegion(self, buffer, access, kind)
        self.mrs.append(mr)
        return mr

    def create_queues(self, n_qps: int, **kwargs) -> "QueueSet":
        return QueueSet(self, n_qps, **kwargs)

    def close(self) -> None:
        for mr in self.mrs:
            mr.deregister()
        self.mrs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# How the GPU learns that staging slots are free again: "status", a credit counter the
# emulated NIC publishes in each QP's status line; "completions", from the completions of
# pushed WQEs (``dv.stage_signal`` asks for enough of them), as a real NIC requires; the
# engine then publishes no counter, so nothing else can stand in for them.
STAGE_CREDITS = ("status", "completions")


class QueueSet:
    """``n_qps`` queue pairs, each with its own CQ, staging ring and host bounce ring.

    Rings are rows of one allocation per kind: SQ ring, doorbell record, doorbell
    register, NIC status line, CQ ring, CQ doorbell record, staging ring, bounce ring
    (all GPU-visible host memory), and the GPU-side state and WQE bookkeeping (GPU
    memory). Row ``i`` is QP ``i``; ``qpns[i]`` is its number on the NIC.
    """

    def __init__(self, pd: ProtectionDomain, n_qps: int, sq_bbs: int = 256, ncqe: int = 256,
                 stage_slots: int = 256, stage_slot_bytes: int = 256, bounce_bytes: int = 64 * 1024,
                 stage_credits: str = "status", poll_delay_ns: int = 0):
        ctx = pd.context
        if stage_credits not in STAGE_CREDITS:
            raise ValueError(f"stage_credits={stage_credits!r}: allowed {', '.join(STAGE_CREDITS)}")
        if not 0 <= poll_delay_ns <= 100_000:
            raise ValueError(f"poll_delay_ns={poll_delay_ns}: allowed 0 to 100000 (a pause "
                             "before a completion wait's first poll, device verbs I_POLL_DELAY_NS)")
        if not 1 <= n_qps <= ctx.max_qps:
            raise ValueError(f"n_qps={n_qps}: allowed 1 to max_qps={ctx.max_qps}")
        _pow2("sq_bbs", sq_bbs, 16, 32768)
        _pow2("ncqe", ncqe, 16, 1 << 22)
        if ncqe < sq_bbs:
            raise ValueError(f"ncqe={ncqe} must be at least sq_bbs={sq_bbs}: every WQE may "
                             "complete with an error CQE")
        # Powers of two: the device verbs find slots with shifts, not 64-bit divisions.
        _pow2("stage_slot_bytes", stage_slot_bytes, 64, 1 << 20)
        if stage_slots < 1:
            raise ValueError(f"stage_slots={stage_slots}: must be at least 1")
        if bounce_bytes % 4 or bounce_bytes < 64:
            raise ValueError(f"bounce_bytes={bounce_bytes}: a multiple of 4, at least 64")
        self.pd = pd
        self.n_qps = n_qps
        self.sq_bbs, self.ncqe = sq_bbs, ncqe
        self.stage_slots, self.stage_slot_bytes = stage_slots, stage_slot_bytes
        self.bounce_words = bounce_bytes // 4
        n = n_qps
        self.sq = mapped((n, sq_bbs * L.WQE_BB // 4), np.uint32)
        self.dbrec = mapped((n, L.QP_DBREC.itemsize // 4), np.uint32)
        self.uar = mapped((n,), np.uint64)
        self.status = mapped((n, L.STATUS_WORDS), np.uint32)
        self.cq = mapped((n, ncqe * L.CQE_SIZE // 4), np.uint32)
        self.cqdb = mapped((n, L.CQ_DBREC.itemsize // 4), np.uint32)
        self.stage = mapped((n, stage_slots * stage_slot_bytes // 4), np.uint32)
        self.bounce = mapped((n, self.bounce_words), np.uint32)
        # CQEs start invalid: opcode 0xf in op_own, the last byte of each entry.
        self.cq.host.reshape(n, ncqe, L.CQE_SIZE // 4)[:, :, L.CQE_W_TAIL] = \
            np.uint32(L.CQE_INVALID << 4 << 24)
        self.stage_mr = pd.reg_mr(self.stage, access=L.ACCESS_LOCAL_WRITE, kind=L.MEM_STAGING)
        self.bounce_mr = pd.reg_mr(self.bounce, access=L.ACCESS_LOCAL_WRITE)
        self.qpns = np.array([next(ctx._qpn) for _ in range(n)], dtype=np.int64)
        self.cqns = np.array([next(ctx._cqn) for _ in range(n)], dtype=np.int64)
        info = np.zeros((n, dv.I_COLS), dtype=np.int64)
        info[:, dv.I_QPN] = self.qpns
        info[:, dv.I_SQ_BBS] = sq_bbs
        info[:, dv.I_NCQE] = ncqe
        info[:, dv.I_LOG_NCQE] = ncqe.bit_length() - 1
        info[:, dv.I_SLOTS] = stage_slots
        info[:, dv.I_SLOT_BYTES] = stage_slot_bytes
        info[:, dv.I_SLOT_SHIFT] = stage_slot_bytes.bit_length() - 1
        info[:, dv.I_STAGE_ADDR] = self.stage.address + np.arange(n) * self.stage.host[0].nbytes
        info[:, dv.I_STAGE_LKEY] = self.stage_mr.lkey
        info[:, dv.I_BOUNCE_ADDR] = self.bounce.address + np.arange(n) * self.bounce.host[0].nbytes
        info[:, dv.I_BOUNCE_LKEY] = self.bounce_mr.lkey
        info[:, dv.I_BOUNCE_WORDS] = self.bounce_words
        info[:, dv.I_STAGE_CQE] = int(stage_credits == "completions")
        info[:, dv.I_POLL_DELAY_NS] = poll_delay_ns
        self.stage_credits = stage_credits
        self.info_host = info
        self.info = cuda.to_device(info)
        self.state = device_zeros((n, dv.S_COLS), np.int64)
        self.wqe_aux = device_zeros((n, sq_bbs), np.int64)
        err = ffi.new("char[]", _ERRLEN)
        for i in range(n):
            cq = ffi.new("struct gw_cq_desc *")
            cq.cqn = int(self.cqns[i])
            cq.ncqe = ncqe
            cq.cqes = ffi.cast("void *", self.cq.address + i * self.cq.host[0].nbytes)
            cq.dbrec = ffi.cast("void *", self.cqdb.address + i * self.cqdb.host[0].nbytes)
            _check(lib.gw_engine_add_cq(ctx._engine, cq, err, _ERRLEN), err)
            qp = ffi.new("struct gw_qp_desc *")
            qp.qpn = int(self.qpns[i])
            qp.cqn = int(self.cqns[i])
            qp.sq_bbs = sq_bbs
            qp.sq = ffi.cast("void *", self.sq.address + i * self.sq.host[0].nbytes)
            qp.dbrec = ffi.cast("void *", self.dbrec.address + i * self.dbrec.host[0].nbytes)
            qp.status = ffi.cast("void *", self.status.address + i * self.status.host[0].nbytes)
            qp.staging_key = self.stage_mr.lkey
            qp.stage_slots = stage_slots
            qp.stage_slot_bytes = stage_slot_bytes
            qp.stage_addr = int(info[i, dv.I_STAGE_ADDR])
            if stage_credits == "completions":
                qp.flags = lib.GW_QP_F_STAGE_CREDITS_IN_CQE
            _check(lib.gw_engine_add_qp(ctx._engine, qp, err, _ERRLEN), err)
        ctx._keep.append(self)

    @property
    def device_args(self) -> tuple:
        """The tuple ``Q`` that kernels pass to the device verbs (order: verbs.Q_*)."""
        return (self.sq.kernel, self.dbrec.kernel, self.uar.kernel, self.status.kernel,
                self.cq.kernel, self.cqdb.kernel, self.stage.kernel, self.state, self.info,
                self.wqe_aux, self.bounce.kernel)

    def qp_state(self, i: int) -> str:
        value = int(self.status.host[i, L.STATUS_W_QP_STATE])
        return {L.QPS_RTS: "rts", L.QPS_ERR: "error"}.get(value, f"state {value}")

    def gpu_state(self) -> np.ndarray:
        """The GPU-side QP state rows (columns verbs.S_*), copied to the host."""
        return self.state.copy_to_host()

    def reset(self, i: int) -> None:
        """Takes QP ``i`` from the error state back to ready-to-send (no kernel may run).

        Like a modify-QP through RESET to RTS: both sides' send-queue, staging and
        bounce counters restart from zero; completion-queue counters carry on.
        """
        self.dbrec.host[i] = 0
        state = self.state.copy_to_host()
        keep = state[i, dv.S_CQ_CI]
        state[i] = 0
        state[i, dv.S_CQ_CI] = keep
        self.state.copy_to_device(state)
        rc = lib.gw_engine_qp_reset(self.pd.context._engine, int(self.qpns[i]))
        if rc != 0:
            raise VerbsError(f"the engine did not reset qp {int(self.qpns[i])} (rc={rc})")

    def close(self) -> None:
        self.stage_mr.deregister()
        self.bounce_mr.deregister()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
