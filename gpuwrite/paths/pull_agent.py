"""nic_pull's GPU-resident stand-in: a persistent block that answers the engine's pulls.

A NIC that pulls a payload sends read requests up PCIe to the GPU and gets the bytes back
as completions. In emulated mode a CPU thread plays the NIC, and a CPU thread cannot issue
a PCIe read of GPU memory. The copy-engine stand-in (``pull_agent="copy_engine"``) pays a
CUDA driver call and a stream wait per pull, about 9 us of host-side cost on an H100,
whatever the size, more than the read it stands for. This agent makes the same trip a
read does: the engine writes a request into mapped host memory (``struct gw_pull_req``,
csrc/gw_engine.h), one GPU block polls the ring (a PCIe read per poll, which sees up to
``AGENT_BATCH`` requests), copies the bytes of every whole request it found, in ticket
order, into the engine's buffer with ``copy_bytes`` (16-byte posted writes) and answers
them with one fence and a done word each, as a NIC keeps several reads in flight. On an
H100 a probe of this shape answered in about the floor plus the copy time
(``/work/shared/probes/pull_agent_probe.py``). Every engine worker posts to the one ring
(tickets are claimed atomically).

The CUDA simulator runs one kernel at a time, so there the agent cannot run beside the
sender: nic_pull on the simulator copies with memcpy (``pull_agent="copy_engine"``; the
engine has no CUDA there). There the agent kernel is tested alone, fed by the test, and
an agent that is gone is tested with the engine.

Every wait has an end: the engine fails a pull the agent does not answer within
``pull_timeout_s`` (an error completion with reason ``pull_failed``), and the agent leaves
its loop when told to stop or after ``idle_timeout_s`` without a request.
"""
from __future__ import annotations

import ctypes

import numpy as np
from numba import int64

from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device.copy import copy_bytes
from gpuwrite.device.intrinsics import (fence_sys, globaltimer_ns, ld_acquire_sys_u64,
                                        st_relaxed_sys_u32, warp_sync, words_at)
from gpuwrite.host.memory import mapped

PULL_AGENTS = ("gpu", "copy_engine")
STOP_BYTES = lib.GW_PULL_STOP_BYTES
_ADDR_MASK = (1 << lib.GW_PULL_ADDR_BITS) - 1
# Columns of the agent's outcome (int64, GPU memory).
A_EXIT, A_PULLS, A_BYTES = 0, 1, 2
EXIT_RUNNING, EXIT_STOPPED, EXIT_IDLE = 0, 1, 2
EXIT_NAMES = {EXIT_RUNNING: "running", EXIT_STOPPED: "stopped",
              EXIT_IDLE: "left after its idle timeout"}


# Requests one poll reads: the first warp's 32 lanes, four words of a request each. A
# NIC keeps many reads in flight; an agent that answered one request per poll paid a PCIe
# round trip and a system-scope release per pull, about 3.5 us, so 64-byte pulls of 32 QPs
# moved 19 MB/s on an H100 (BENCHMARKS.md, session 13).
AGENT_BATCH = 8


@cuda.jit(device=True)
def _ready(words, j, t, slot_bits):
    """Whether request j of a poll (ticket t + j) is whole: its ticket word names the
    ticket and both address words carry the ticket's lap (gw_pull_req)."""
    tj = t + j
    tag = ((tj >> slot_bits) + 1) & 0xFFFF
    return ((words[j, 0] >> 32) & 0xFFFFFFFF) == ((tj + 1) & 0xFFFFFFFF) and \
        ((words[j, 1] >> 48) & 0xFFFF) == tag and ((words[j, 2] >> 48) & 0xFFFF) == tag


@cuda.jit
def _agent(ring, done, idle_timeout_ns, outcome):
    # words: what the first warp's poll read, request by request. sh[j]: request j of the
    # batch (bytes, source, destination); shk[0]: the batch's size (-1: the idle timeout
    # passed), shk[1]: lane 0's verdict on the idle timeout, for the whole warp.
    # Shared memory rather than shuffles: the CUDA simulator has no shuffles, and there
    # the agent's batching is tested (alone, fed by the test).
    words = cuda.shared.array((AGENT_BATCH, 4), dtype=int64)
    sh = cuda.shared.array((AGENT_BATCH, 3), dtype=int64)
    shk = cuda.shared.array(2, dtype=int64)
    tid = cuda.threadIdx.x
    slots = done.shape[0]
    slot_bits = 0
    while (1 << slot_bits) < slots:
        slot_bits += 1
    batch = min(AGENT_BATCH, slots)
    t = 0
    while True:
        if tid < 32:
            # Lane l reads word l & 3 of ticket t + l // 4: one warp-wide load, one PCIe
            # round trip per poll, every word acquired (gw_pull_req).
            g = tid >> 2
            req = ring[(t + g) & (slots - 1)]
            start = globaltimer_ns()
            while True:
                words[g, tid & 3] = int64(ld_acquire_sys_u64(req, tid & 3))
                if tid == 0:
                    shk[1] = 1 if globaltimer_ns() - start > idle_timeout_ns else 0
                warp_sync(32)
                # Tickets are answered in order: the batch is the run of whole requests
                # from ticket t. Every lane reads the same words: one decision for the warp.
                k = 0
                while k < batch and _ready(words, k, t, slot_bits):
                    k += 1
                if k > 0:
                    if tid < k:
                        sh[tid, 0] = words[tid, 0] & 0xFFFFFFFF
                        sh[tid, 1] = words[tid, 1] & _ADDR_MASK
                        sh[tid, 2] = words[tid, 2] & _ADDR_MASK
                    if tid == 0:
                        shk[0] = k
                    break
                if shk[1] != 0:
                    if tid == 0:
                        shk[0] = -1
                    break
                warp_sync(32)   # every lane has read words before the next poll writes them
        cuda.syncthreads()
        k = shk[0]
        if k < 0:
            if tid == 0:
                outcome[A_EXIT] = EXIT_IDLE
            return
        # The batch's pulls, one after another, each by the whole block; a stop request
        # ends the batch (tickets after it are never answered).
        m = 0
        nbytes = 0
        while m < k and sh[m, 0] != STOP_BYTES:
            n = sh[m, 0]
            nwords = (n + 3) >> 2
            copy_bytes(words_at(sh[m, 2], nwords), 0, words_at(sh[m, 1], nwords), 0, n, tid,
                       cuda.blockDim.x)
            nbytes += n
            m += 1
        stopped = m < k
        answered = m + 1 if stopped else m
        # Every thread's stores precede the barrier. Then lane j answers ticket t + j with
        # a release pattern (a fence, then its done word): one fence and one coalesced
        # store for the batch, where a release store per pull cost 0.64 us each.
        cuda.syncthreads()
        if tid < answered:
            fence_sys()
            st_relaxed_sys_u32(done, (t + tid) & (slots - 1), t + tid + 1)
        if tid == 0:
            outcome[A_PULLS] += m
            outcome[A_BYTES] += nbytes
            if stopped:
                outcome[A_EXIT] = EXIT_STOPPED
        if stopped:
            return
        t += m


def _nonblocking_stream():
    """A stream that does not wait for the legacy default stream, nor it for this one: the
    agent runs beside the kernels the runner launches there. Numba's ``cuda.stream()``
    makes blocking streams, so the driver is asked directly."""
    libcuda = ctypes.CDLL("libcuda.so.1")
    handle = ctypes.c_void_p()
    if libcuda.cuStreamCreate(ctypes.byref(handle), 1) != 0:   # CU_STREAM_NON_BLOCKING
        raise RuntimeError("cuStreamCreate failed: the pull agent needs a stream of its own")
    return libcuda, handle


# Agents whose ring the engine could not be detached from, or whose kernel may still run
# after its engine is gone: kept alive for the process.
_KEPT: list = []
# The key under which the engine's pins hold an attached agent (one per engine).
_PIN = ("pull_agent",)

class PullAgent:
    """Runs the agent for a context's engine: ``with PullAgent(ctx): ...`` sends the
    engine's pulls from GPU memory to it, and stops it at the end."""

    def __init__(self, ctx, *, threads: int | None = None, slots: int = 64,
                 pull_timeout_s: float = 1.0, idle_timeout_s: float = 60.0):
        if slots < 1 or slots > 65536 or slots & (slots - 1):
            raise ValueError(f"slots={slots}: a power of two from 1 to 65536")
        if pull_timeout_s <= 0 or idle_timeout_s <= 0:
            raise ValueError(f"pull_timeout_s={pull_timeout_s}, idle_timeout_s="
                             f"{idle_timeout_s}: both must be positive")
        self.ctx = ctx
        self.threads = threads or 512
        if self.threads % 32 or not 32 <= self.threads <= 1024:
            raise ValueError(f"threads={self.threads}: a multiple of 32 from 32 to 1024 (the "
                             "first warp polls the ring together)")
        self.slots = slots
        self.pull_timeout_s = pull_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.ring = mapped((slots, 4), np.uint64)
        self.done = mapped((slots,), np.uint32)
        self.outcome = cuda.to_device(np.zeros(3, dtype=np.int64))
        self._stream = None

    def start(self, launch: bool = True) -> "PullAgent":
        """Points the engine at the agent's ring and launches the agent (``launch=False``
        leaves it unlaunched: an agent that is gone, for tests)."""
        rc = lib.gw_engine_set_pull_agent(self.ctx._engine, ffi.cast("void *", self.ring.address),
                                          ffi.cast("void *", self.done.address), self.slots,
                                          int(self.pull_timeout_s * 1e9))
        if rc != 0:
            raise RuntimeError("the engine refused the pull agent's ring")
        # The engine reads and writes the ring from now on: it holds the agent (and so the
        # ring) until the agent is detached or the engine is gone (engine_gone), whether
        # or not the caller keeps this object.
        self.ctx._eng.pins[_PIN] = self
        if not launch:
            return self
        if SIMULATOR:
            raise RuntimeError("the CUDA simulator runs one kernel at a time (a global kernel "
                               "context): the pull agent cannot run beside the sender there")
        args = (self.ring.kernel, self.done.kernel, int(self.idle_timeout_s * 1e9), self.outcome)
        self._libcuda, handle = _nonblocking_stream()
        self._stream = cuda.external_stream(handle.value)
        self._handle = handle
        _agent[1, self.threads, self._stream](*args)
        return self

    def stop(self) -> dict:
        """Stops the agent and detaches it from the engine; returns what it did."""
        answered = lib.gw_engine_stop_pull_agent(self.ctx._engine) == 0
        if self._stream is not None:
            # Unanswered, the agent has left already (idle) or is stuck: wait only for
            # one that has ended, never on a kernel that may not.
            if not answered and self._libcuda.cuStreamQuery(self._handle) != 0:
                # It may still read the ring and answer late pulls: never free either, and
                # leave the engine pointed at it (the engine keeps late pulls' regions).
                _KEPT.append(self)
                raise RuntimeError("the pull agent answers no request and still runs")
            self._stream.synchronize()
            self._libcuda.cuStreamDestroy_v2(self._handle)
            self._stream = None
        if lib.gw_engine_set_pull_agent(self.ctx._engine, ffi.NULL, ffi.NULL, 0, 0) != 0:
            _KEPT.append(self)   # a worker may still read the ring: never free it
            raise RuntimeError("the engine's workers did not let go of the pull agent's ring "
                               "within 10 s; its memory is kept")
        self.ctx._eng.pins.pop(_PIN, None)
        out = self.outcome.copy_to_host()
        return {"exit": EXIT_NAMES.get(int(out[A_EXIT]), str(out[A_EXIT])),
                "pulls": int(out[A_PULLS]), "bytes": int(out[A_BYTES]), **self.engine_pulls()}

    def engine_pulls(self) -> dict:
        """The engine's count of pulls the agent answered and of pulls it failed."""
        failed = ffi.new("uint64_t *")
        answered = lib.gw_engine_agent_pulls(self.ctx._engine, failed)
        return {"engine_answered": int(answered), "engine_failed": int(failed[0])}

    def engine_gone(self) -> None:
        """Called by the engine's teardown while this agent is still attached (the context
        was closed without ``stop``): a kernel that may still run keeps polling the ring
        until its idle timeout, so then the ring is kept for the life of the process."""
        if self._stream is not None and self._libcuda.cuStreamQuery(self._handle) != 0:
            _KEPT.append(self)

    def __enter__(self) -> "PullAgent":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
