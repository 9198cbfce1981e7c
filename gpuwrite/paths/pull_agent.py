"""nic_pull's GPU-resident stand-in: persistent blocks that answer the engine's pulls.

A NIC that pulls a payload sends read requests up PCIe to the GPU and gets the bytes back
as completions. In emulated mode a CPU thread plays the NIC, and a CPU thread cannot issue
a PCIe read of GPU memory. The copy-engine stand-in (``pull_agent="copy_engine"``) pays a
CUDA driver call and a stream wait per pull, about 9 us of host-side cost on an H100,
whatever the size, more than the read it stands for. This agent makes the same trip a
read does: the engine writes a request into mapped host memory (``struct gw_pull_req``,
csrc/gw_engine.h), the agent's first block polls the ring (a PCIe read per poll, which
sees up to ``AGENT_BATCH`` requests), copies the bytes of every whole request it found, in
ticket order, into the engine's buffer with ``copy_bytes`` (16-byte posted writes) and
answers them with one fence and a done word each, as a NIC keeps several reads in flight.
A batch of ``split_bytes`` or more is cut into chunks that the agent's other blocks copy
too (one block writes host memory at about 37 GB/s on an H100, less than the GPU's
bulk-store ceiling); the first block answers once every chunk is copied, so answers stay
in ticket order. On an H100 a probe of this shape answered in about the floor plus the
copy time (``/work/shared/probes/pull_agent_probe.py``). Every engine worker posts to the
one ring (tickets are claimed atomically).

The CUDA simulator runs one kernel at a time, so there the agent cannot run beside the
sender: nic_pull on the simulator copies with memcpy (``pull_agent="copy_engine"``; the
engine has no CUDA there). There the agent kernel is tested alone, fed by the test, and
an agent that is gone is tested with the engine. The simulator also runs a kernel's
blocks one after another: there the first block copies every chunk itself, which is what
it does on a GPU for chunks no other block has claimed.

Every wait has an end: the engine fails a pull the agent does not answer within
``pull_timeout_s`` (an error completion with reason ``pull_failed``), the agent leaves
its loop when told to stop or after ``idle_timeout_s`` without a request, its other
blocks leave with it or when it has not polled for ``idle_timeout_s``, and it leaves
without answering if their chunks are not copied within ``idle_timeout_s``.
"""
from __future__ import annotations

import contextlib
import ctypes

import numpy as np
from numba import int64

from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.cudaenv import SIMULATOR, cuda, driver
from gpuwrite.device.copy import copy_bytes
from gpuwrite.device.intrinsics import (fence_sys, globaltimer_ns, ld_acquire_gpu_u64,
                                        ld_acquire_sys_u64, st_relaxed_sys_u32, st_relaxed_sys_u64,
                                        warp_sync, words_at)
from gpuwrite.device.verbs import KERNEL_OPTIONS, MAX_REGISTERS
from gpuwrite.host.memory import mapped
from gpuwrite.kernel_cache import cached

PULL_AGENTS = ("gpu", "copy_engine")
STOP_BYTES = lib.GW_PULL_STOP_BYTES
_ADDR_MASK = (1 << lib.GW_PULL_ADDR_BITS) - 1
# Columns of the agent's outcome (int64, GPU memory): how it ended, pulls and bytes
# answered, chunks of split batches copied by blocks other than the leader.
A_EXIT, A_PULLS, A_BYTES, A_HELPED = range(4)
EXIT_RUNNING, EXIT_STOPPED, EXIT_IDLE, EXIT_HELPER_LATE = range(4)
EXIT_NAMES = {EXIT_RUNNING: "running", EXIT_STOPPED: "stopped",
              EXIT_IDLE: "left after its idle timeout",
              EXIT_HELPER_LATE: "left: a helper block did not finish its chunks within the idle timeout"}


# Requests one poll reads: the first warp's 32 lanes, four words of a request each. A
# NIC keeps many reads in flight; an agent that answered one request per poll paid a PCIe
# round trip and a system-scope release per pull, about 3.5 us, so 64-byte pulls of 32 QPs
# moved 19 MB/s on an H100 (BENCHMARKS.md, session 13).
AGENT_BATCH = 8
# One block copying GPU memory into mapped host memory moves about 37 GB/s on an H100, so
# a 1 MiB pull answered by one block held nic_pull to 0.58 to 0.70x of the bulk-store
# ceiling (BENCHMARKS.md, session 13). A batch of at least SPLIT_BYTES is cut into chunks
# (about two per block, at least MIN_CHUNK_BYTES, a multiple of 16 bytes) that every
# block of the agent claims. A split costs about 2 us (the claims' atomics, the helpers'
# fences, the leader's wait): on an H100 (session 14) four blocks took a 1 MiB pull from
# 39 to 34 us and 1 MiB pulls of 128 QPs from 36 to 45-48 GB/s, but a 256 KiB pull from
# 17-18 to 19-20 us and 64 KiB pulls of 32 QPs (batches of 512 KiB) from 200 to 184 Gb/s.
SPLIT_BYTES = 1 << 20
MIN_CHUNK_BYTES = 32 << 10
# A batch of two or more requests of at most WARP_COPY_BYTES each is copied a request to a
# warp, side by side; a batch of one, or one with a larger request, by the whole block.
# Copied by the whole block one after another, each request waited for its loads' trip to
# HBM before the next began, so a batch of eight small pulls cost eight of them: Fig. 4's
# 64 B to 4 KiB pulls of 32 QPs ran at about 0.8 M pulls/s whatever the size. On an H200
# (BENCHMARKS.md, session 46, three rounds against the code before): Fig. 4's 64 B 0.41 ->
# 0.58 Gb/s, 4 KiB 24 -> 34, 64 KiB and 1 MiB level; 16 QPs' one pull in flight each 18 ->
# 14 to 17 us at 64 B, 19 -> 16 at 4 KiB; one and four QPs level. Groups of several warps
# a request (a lone request by the whole block in the same loop) were slower: one QP's 64 B
# pull 0.7 us, Fig. 4's 4 KiB 31 Gb/s (the group's size not a constant in the copy).
WARP_COPY_BYTES = 8192
BLOCKS = 4
# A block of the agent: compiled for at most 128 registers a thread (KERNEL_OPTIONS), so
# 512 threads launch; uncapped, the compiler gave it 127, and a block of 1024 threads
# (which the agent once accepted) failed at launch with a CUDA error, not a clear one.
MAX_THREADS = 65536 // MAX_REGISTERS
# A persistent kernel's blocks must all stay resident beside the kernels whose pulls they
# answer (a helper that never starts costs only speed, but holds an SM's slot that the
# sender may need): at most MAX_BLOCKS, about half the SMs of an H100.
MAX_BLOCKS = 64
# Words the agent's blocks share (int64, GPU memory). CLAIM: the split batch's number
# (high 32 bits) and its chunks not yet claimed (low 32 bits); FINISHED: chunks copied,
# all batches; EXIT: the leader has left (the others leave too); BEAT: the leader's clock
# at its last poll (the others leave when it stops for the idle timeout).
C_CLAIM, C_FINISHED, C_EXIT, C_BEAT = range(4)
# Columns of a split batch's descriptor rows (GPU memory, AGENT_BATCH + 1 rows): bytes,
# source, destination, first chunk; row j's first chunk is the end of row j - 1's, the
# row after the last holds the batch's chunk count, and row AGENT_BATCH column 0 the
# chunk size.
D_BYTES, D_SRC, D_DST, D_FIRST = range(4)
# A block's shared words for split batches: two claimed chunks (bytes, source,
# destination at 0 and 3), a helper's batch number, the leader's chunk count.
S_SEQ, S_COUNT, S_WORDS = 6, 7, 8


@cuda.jit(device=True)
def _ready(words, j, t, slot_bits):
    """Whether request j of a poll (ticket t + j) is whole: its ticket word names the
    ticket and both address words carry the ticket's lap (gw_pull_req)."""
    tj = t + j
    tag = ((tj >> slot_bits) + 1) & 0xFFFF
    return ((words[j, 0] >> 32) & 0xFFFFFFFF) == ((tj + 1) & 0xFFFFFFFF) and \
        ((words[j, 1] >> 48) & 0xFFFF) == tag and ((words[j, 2] >> 48) & 0xFFFF) == tag


@cuda.jit(device=True)
def _copy(dst, src, n, tid, nthreads):
    """``n`` bytes from address ``src`` to address ``dst`` by the whole block."""
    nwords = (n + 3) >> 2
    copy_bytes(words_at(dst, nwords), 0, words_at(src, nwords), 0, n, tid, nthreads)


@cuda.jit(device=True)
def _claim(desc, ctl, seq, guess, shc, at):
    """Thread 0 claims the next chunk of split batch ``seq`` into ``shc[at:at + 3]``
    (bytes, source, destination; bytes -1: none is left) and returns CLAIM's value after
    its claim, the guess for the next. A compare-and-swap takes a chunk only while CLAIM
    still names this batch: a block late for a finished batch claims nothing of the next.
    Chunks are claimed from the last; ``guess`` is what CLAIM was last seen to hold (one
    atomic per claim where no other block claimed in between)."""
    v = guess
    while True:
        left = v & 0xFFFFFFFF
        if (v >> 32) != seq or left == 0:
            shc[at] = -1
            return v
        seen = cuda.atomic.cas(ctl, C_CLAIM, v, v - 1)
        if seen == v:
            c = left - 1
            j = 0
            while desc[j + 1, D_FIRST] <= c:
                j += 1
            chunk = desc[AGENT_BATCH, D_BYTES]
            off = (c - desc[j, D_FIRST]) * chunk
            shc[at] = min(chunk, desc[j, D_BYTES] - off)
            shc[at + 1] = desc[j, D_SRC] + off
            shc[at + 2] = desc[j, D_DST] + off
            return v - 1
        v = seen


@cuda.jit(device=True)
def _copy_chunks(desc, ctl, seq, shc):
    """Claims chunks of split batch ``seq`` until none is left and copies each; returns
    how many this block copied. Thread 0 claims the next chunk while the block copies
    the one before (two slots of ``shc``), so a claim's trip to L2 overlaps a copy."""
    tid = cuda.threadIdx.x
    copied = 0
    v = int64(0)
    if tid == 0:
        v = _claim(desc, ctl, seq, int64(ld_acquire_gpu_u64(ctl, C_CLAIM)), shc, 0)
    cuda.syncthreads()
    cur = 0
    while True:
        n = shc[cur]
        if n < 0:
            return copied
        if tid == 0:
            v = _claim(desc, ctl, seq, v, shc, 3 - cur)
        _copy(shc[cur + 2], shc[cur + 1], n, tid, cuda.blockDim.x)
        copied += 1
        cuda.syncthreads()      # the chunk is read by all; the next one is claimed
        cur = 3 - cur


@cuda.jit(device=True)
def _helper(ctl, desc, idle_timeout_ns, outcome, shc):
    """A block other than the first: copies its share of every split batch; leaves when
    the leader has left or has not polled for the idle timeout."""
    tid = cuda.threadIdx.x
    last = int64(0)
    while True:
        if tid == 0:
            beat_seen = int64(-1)
            seen_at = globaltimer_ns()
            shc[S_SEQ] = -1
            polls = 0
            while True:
                # Only CLAIM in the hot loop: a new batch is seen one L2 trip after it is
                # published. The leader's state every 32 polls.
                v = int64(ld_acquire_gpu_u64(ctl, C_CLAIM))
                if (v >> 32) != last and (v & 0xFFFFFFFF) != 0:
                    shc[S_SEQ] = v >> 32
                    break
                polls += 1
                if polls & 31 == 0:
                    if ld_acquire_gpu_u64(ctl, C_EXIT) != 0:
                        break
                    beat = int64(ld_acquire_gpu_u64(ctl, C_BEAT))
                    now = globaltimer_ns()
                    if beat != beat_seen:
                        beat_seen = beat
                        seen_at = now
                    elif now - seen_at > idle_timeout_ns:
                        break
        cuda.syncthreads()
        seq = shc[S_SEQ]
        if seq < 0:
            return
        last = seq
        copied = _copy_chunks(desc, ctl, seq, shc)
        if tid == 0 and copied > 0:
            # The block's stores precede the barrier in _copy_chunks; this fence orders
            # them before the count the leader waits for, and so before its done words.
            fence_sys()
            cuda.atomic.add(ctl, C_FINISHED, copied)
            cuda.atomic.add(outcome, A_HELPED, copied)


@cuda.jit(device=True)
def _split(sh, m, nbytes, desc, ctl, seq, finished, min_chunk, idle_timeout_ns, shc):
    """The leader's side of a split batch (its first ``m`` requests, ``nbytes`` in all):
    publishes the chunks, copies its own claims, then waits until every claimed chunk is
    copied. Returns the chunk count every block has finished since the start, or -1 if
    the others' chunks were not finished within the idle timeout."""
    tid = cuda.threadIdx.x
    if tid == 0:
        share = (nbytes + 2 * cuda.gridDim.x - 1) // (2 * cuda.gridDim.x)
        chunk = max(min_chunk, (share + 15) & ~15)
        first = int64(0)
        for j in range(m):
            desc[j, D_BYTES] = sh[j, 0]
            desc[j, D_SRC] = sh[j, 1]
            desc[j, D_DST] = sh[j, 2]
            desc[j, D_FIRST] = first
            first += (sh[j, 0] + chunk - 1) // chunk
        desc[m, D_FIRST] = first
        desc[AGENT_BATCH, D_BYTES] = chunk
        shc[S_COUNT] = first
        cuda.threadfence()      # the rows before the batch's number
        st_relaxed_sys_u64(ctl, C_CLAIM, (seq << 32) | first)
    cuda.syncthreads()
    total = finished + shc[S_COUNT]
    copied = _copy_chunks(desc, ctl, seq, shc)
    if tid == 0:
        cuda.atomic.add(ctl, C_FINISHED, copied)
        start = globaltimer_ns()
        shc[S_COUNT] = total
        while int64(ld_acquire_gpu_u64(ctl, C_FINISHED)) < total:
            now = globaltimer_ns()
            st_relaxed_sys_u64(ctl, C_BEAT, now)
            if now - start > idle_timeout_ns:
                shc[S_COUNT] = -1
                break
    cuda.syncthreads()
    return shc[S_COUNT]


@cached
@cuda.jit(**KERNEL_OPTIONS)
def _agent(ring, done, idle_timeout_ns, split_bytes, min_chunk, ctl, desc, outcome):
    # Block 0 leads: its first warp polls the ring, it copies every batch smaller than
    # split_bytes alone and answers every request. The other blocks help with larger
    # batches (_helper). A helper that starts late or leaves early costs speed only: the
    # leader claims whatever chunks nobody else has.
    # words: what the first warp's poll read, request by request. sh[j]: request j of the
    # batch (bytes, source, destination, 1 where its destination overlaps an earlier
    # request's); shk[0]: the batch's size (-1: the idle timeout passed), shk[1]: lane 0's
    # verdict on the idle timeout, for the whole warp. shc: two claimed chunks, a helper's
    # batch, the split's count (S_*).
    # Shared memory rather than shuffles: the CUDA simulator has no shuffles, and there
    # the agent's batching is tested (alone, fed by the test).
    words = cuda.shared.array((AGENT_BATCH, 4), dtype=int64)
    sh = cuda.shared.array((AGENT_BATCH, 4), dtype=int64)
    shk = cuda.shared.array(2, dtype=int64)
    shc = cuda.shared.array(S_WORDS, dtype=int64)
    if cuda.blockIdx.x > 0:
        _helper(ctl, desc, idle_timeout_ns, outcome, shc)
        return
    tid = cuda.threadIdx.x
    slots = done.shape[0]
    slot_bits = 0
    while (1 << slot_bits) < slots:
        slot_bits += 1
    batch = min(AGENT_BATCH, slots)
    t = 0
    seq = int64(0)        # split batches published
    finished = int64(0)   # chunks of them copied
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
                    now = globaltimer_ns()
                    shk[1] = 1 if now - start > idle_timeout_ns else 0
                    st_relaxed_sys_u64(ctl, C_BEAT, now)
                warp_sync(32)
                # Tickets are answered in order: the batch is the run of whole requests
                # from ticket t. Every lane reads the same words: one decision for the warp.
                k = 0
                while k < batch and _ready(words, k, t, slot_bits):
                    k += 1
                if k > 0:
                    if tid < k:
                        n = words[tid, 0] & 0xFFFFFFFF
                        d = words[tid, 2] & _ADDR_MASK
                        sh[tid, 0] = n
                        sh[tid, 1] = words[tid, 1] & _ADDR_MASK
                        sh[tid, 2] = d
                        # Whether this request's destination overlaps an earlier one's: a
                        # lane per request, its loads of the others' words in flight at
                        # once (an all-pairs loop on every thread of the block after the
                        # barrier cost Fig. 4's 16 KiB pulls 15 %, session 46).
                        over = 0
                        for i in range(AGENT_BATCH):
                            di = words[i, 2] & _ADDR_MASK
                            ni = words[i, 0] & 0xFFFFFFFF
                            if i < tid and di < d + n and d < di + ni:
                                over = 1
                        sh[tid, 3] = over
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
                st_relaxed_sys_u64(ctl, C_EXIT, 1)
            return
        # The batch's pulls up to a stop request (tickets after it are never answered).
        m = 0
        nbytes = int64(0)
        while m < k and sh[m, 0] != STOP_BYTES:
            nbytes += sh[m, 0]
            m += 1
        # Pulls whose destinations overlap (a QP's writes to one range: the later must
        # land last, as a NIC places a QP's writes in order) are copied one after another
        # with a barrier between them, never split or side by side: threads of one block,
        # or blocks, storing the same bytes in no order would let an earlier write win.
        # Requests of at most WARP_COPY_BYTES each are copied a warp each (`small`).
        ordered = False
        small = True
        for j in range(m):
            if sh[j, 3] != 0:
                ordered = True
            if sh[j, 0] > WARP_COPY_BYTES:
                small = False
        if cuda.gridDim.x > 1 and nbytes >= split_bytes and not ordered:
            seq += 1
            finished = _split(sh, m, nbytes, desc, ctl, seq, finished, min_chunk, idle_timeout_ns,
                              shc)
            if finished < 0:
                # A helper holds chunks it has not finished: answering would publish bytes
                # not yet there. Leave unanswered: the engine fails these pulls.
                if tid == 0:
                    outcome[A_EXIT] = EXIT_HELPER_LATE
                    st_relaxed_sys_u64(ctl, C_EXIT, 1)
                return
        else:
            if small and not ordered and m > 1:
                # Warp w copies requests w, w + warps, ...: their loads are in flight at once.
                warps = cuda.blockDim.x >> 5
                j = tid >> 5
                while j < m:
                    _copy(sh[j, 2], sh[j, 1], sh[j, 0], tid & 31, 32)
                    j += warps
            else:
                for j in range(m):
                    _copy(sh[j, 2], sh[j, 1], sh[j, 0], tid, cuda.blockDim.x)
                    if ordered:
                        cuda.syncthreads()      # the same for the whole block
        stopped = m < k
        answered = m + 1 if stopped else m
        # Every thread's stores precede the barrier. Then lane j answers ticket t + j with
        # a release pattern (a fence, then its done word): one fence and one coalesced
        # store for the batch, where a release store per pull cost 0.64 us each.
        cuda.syncthreads()
        if stopped and tid == 0:
            st_relaxed_sys_u64(ctl, C_EXIT, 1)      # the helpers leave
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
    libcuda = driver()
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
    """Runs the agent for a context's engine: ``with PullAgent(ctx) as agent: ...`` sends
    the engine's pulls from GPU memory to it, stops it at the end and leaves what it did
    in ``agent.report``.

    Inside the ``with`` block Numba's frees of device memory wait (``cuda.defer_cleanup``):
    Numba frees an array whenever the garbage collector finds it, and nothing that may
    wait for the whole context belongs beside a persistent kernel. In one H100 run in
    3740 the sender started only after the agent had left after its idle timeout, and the
    run's pulls failed (BENCHMARKS.md, session 16); a free beside the agent was the
    suspect, but a direct test saw one return at once, so the cause is not established.
    ``start`` and ``stop`` called directly leave the frees to the caller."""

    def __init__(self, ctx, *, threads: int | None = None, blocks: int = BLOCKS, slots: int = 64,
                 split_bytes: int = SPLIT_BYTES, pull_timeout_s: float = 1.0,
                 idle_timeout_s: float = 60.0):
        if slots < 1 or slots > 65536 or slots & (slots - 1):
            raise ValueError(f"slots={slots}: a power of two from 1 to 65536")
        if pull_timeout_s <= 0 or idle_timeout_s <= 0:
            raise ValueError(f"pull_timeout_s={pull_timeout_s}, idle_timeout_s="
                             f"{idle_timeout_s}: both must be positive")
        if not 1 <= blocks <= MAX_BLOCKS:
            raise ValueError(f"blocks={blocks}: from 1 to {MAX_BLOCKS} (the leader and its "
                             "helpers)")
        if split_bytes < 1:
            raise ValueError(f"split_bytes={split_bytes}: at least 1")
        self.ctx = ctx
        self.threads = MAX_THREADS if threads is None else threads
        if self.threads % 32 or not 32 <= self.threads <= MAX_THREADS:
            raise ValueError(f"threads={self.threads}: a multiple of 32 from 32 to "
                             f"{MAX_THREADS} (the first warp polls the ring together; at "
                             f"{MAX_REGISTERS} registers a thread, a block of more does not "
                             "launch)")
        self.blocks = blocks
        self.split_bytes = split_bytes
        self.slots = slots
        self.pull_timeout_s = pull_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.ring = mapped((slots, 4), np.uint64)
        self.done = mapped((slots,), np.uint32)
        self.outcome = cuda.to_device(np.zeros(4, dtype=np.int64))
        self.ctl = cuda.to_device(np.zeros(4, dtype=np.int64))
        self.desc = cuda.to_device(np.zeros((AGENT_BATCH + 1, 4), dtype=np.int64))
        self._stream = None
        self._handle = None
        self._frees_held = None
        self.report: dict | None = None     # what stop() returned

    def start(self, launch: bool = True) -> "PullAgent":
        """Points the engine at the agent's ring and launches the agent (``launch=False``
        leaves it unlaunched: an agent that is gone, for tests). Where the agent cannot be
        launched, the engine is left as it was: its pulls go on through the copy engine."""
        if launch and SIMULATOR:
            # Refused before the engine is pointed at a ring no kernel would ever answer.
            raise RuntimeError("the CUDA simulator runs one kernel at a time (a global kernel "
                               "context): the pull agent cannot run beside the sender there")
        with self.ctx._eng.use() as engine:
            rc = lib.gw_engine_set_pull_agent(engine, ffi.cast("void *", self.ring.address),
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
        try:
            args = (self.ring.kernel, self.done.kernel, int(self.idle_timeout_s * 1e9),
                    self.split_bytes, MIN_CHUNK_BYTES, self.ctl, self.desc, self.outcome)
            self._libcuda, handle = _nonblocking_stream()
            self._handle = handle
            self._stream = cuda.external_stream(handle.value)
            _agent[self.blocks, self.threads, self._stream](*args)
        except BaseException:
            self._detach_unlaunched()
            raise
        return self

    def _detach_unlaunched(self) -> None:
        """Undoes ``start`` where the launch failed (no kernel runs): the stream, the
        engine's pointer at the ring and its pin."""
        if self._handle is not None:
            self._libcuda.cuStreamDestroy_v2(self._handle)
        self._stream = self._handle = None
        self._detach()

    def _detach(self) -> bool:
        """Points the engine away from the ring and lets go of the agent; False where a
        worker did not let go of the ring within 10 s (it may still read it: the agent is
        then kept for the life of the process, never freed)."""
        with self.ctx._eng.use() as engine:
            rc = lib.gw_engine_set_pull_agent(engine, ffi.NULL, ffi.NULL, 0, 0)
        if rc != 0:
            _KEPT.append(self)
            return False
        self.ctx._eng.pins.pop(_PIN, None)
        return True

    def stop(self) -> dict:
        """Stops the agent and detaches it from the engine; returns what it did."""
        with self.ctx._eng.use() as engine:
            answered = lib.gw_engine_stop_pull_agent(engine) == 0
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
        if not self._detach():
            raise RuntimeError("the engine's workers did not let go of the pull agent's ring "
                               "within 10 s; its memory is kept")
        out = self.outcome.copy_to_host()
        # the engine's count of pulls the agent answered, and of those it failed
        failed = ffi.new("uint64_t *")
        with self.ctx._eng.use() as engine:
            engine_answered = int(lib.gw_engine_agent_pulls(engine, failed))
        self.report = {"exit": EXIT_NAMES.get(int(out[A_EXIT]), str(out[A_EXIT])),
                       "pulls": int(out[A_PULLS]), "bytes": int(out[A_BYTES]),
                       "helped_chunks": int(out[A_HELPED]),
                       "engine_answered": engine_answered, "engine_failed": int(failed[0])}
        return self.report

    def engine_gone(self) -> None:
        """Called by the engine's teardown while this agent is still attached (the context
        was closed without ``stop``): a kernel that may still run keeps polling the ring
        until its idle timeout, so then the ring is kept for the life of the process."""
        if self._stream is not None and self._libcuda.cuStreamQuery(self._handle) != 0:
            _KEPT.append(self)

    def __enter__(self) -> "PullAgent":
        self._frees_held = contextlib.ExitStack()
        self._frees_held.enter_context(cuda.defer_cleanup())
        try:
            return self.start()
        except BaseException:
            self._frees_held.close()
            raise

    def __exit__(self, *exc) -> None:
        with self._frees_held:      # the deferred frees run once the agent has stopped
            self.stop()
