"""The kernel that sends a workload of messages through one data path.

One thread block drives one queue pair and sends that QP's messages in order. Thread 0
does the bookkeeping (slots, WQEs, doorbells, completions) and publishes each step's
outcome to the block through shared memory; all threads copy payloads
(``gpuwrite.device.copy.copy_bytes``), except that thread 0 posts small pushes, small
host_staged writes and small inline writes alone (``dv.push_small``, ``dv.push_mid``,
``dv.staged_small``, ``dv.staged_mid``, ``dv.inline_small``, ``dv.inline_mid``) and the
first warp posts medium pushes and host_staged writes without a block barrier.

Each path's kernel comes in two scopes (``send_messages_for(path, scope)``), the runner
taking the narrower where it posts every message of its table (``kernel_scope``):
  "block"   every thread stays; the block meets at a barrier after every message
  "thread"  every thread but 0 leaves after the set-up; no barrier per message (tables of
            messages thread 0 posts alone; not nic_pull)
A first-warp scope (threads past 32 leaving, the warp meeting at a named barrier) was
built and measured level with the block kernel at 512 B to 2 KiB (H200, BENCHMARKS.md,
session 41): the parked warps cost nothing, and it was not kept.

Paths (one kernel each and scope, ``send_messages_for(path, scope)``):
  PUSH     gpu_push: payload written by the GPU into the NIC's staging region
  INLINE   gpu_push_inline: payload written inside the WQE
  PULL     nic_pull: payload left in GPU memory for the NIC to read
  STAGED   host_staged: payload copied by the GPU to a host bounce ring, read by the NIC
"""
from __future__ import annotations

import numpy as np
from numba import int64, uint32

from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device import verbs as dv
from gpuwrite.device.copy import copy_bytes, preload, preload_fits, store_preloaded
from gpuwrite.device.intrinsics import globaltimer_ns, warp_sync
from gpuwrite.kernel_cache import cached

PUSH, INLINE, PULL, STAGED = 0, 1, 2, 3
PATH_IDS = {"gpu_push": PUSH, "gpu_push_inline": INLINE, "nic_pull": PULL, "host_staged": STAGED}
# Which threads a kernel keeps after its set-up (``_send_messages``), and the paths each
# scope is made for.
BLOCK, THREAD = 0, 1
SCOPE_IDS = {"block": BLOCK, "thread": THREAD}
SCOPE_PATHS = {"block": tuple(PATH_IDS), "thread": ("gpu_push", "gpu_push_inline", "host_staged")}

# Columns of the message table.
M_SIZE, M_SRC_WORD, M_DST_OFF = 0, 1, 2
# Kernel parameters (int64 array).
P_BATCH, P_TIMEOUT_NS, P_CHUNK_BYTES, P_DST_ADDR, P_RKEY, P_SRC_ADDR, P_SRC_LKEY, \
    P_WAIT_EACH = range(8)
P_COLS = 8
# Per-QP outcome columns.
R_STATUS, R_SENT, R_SYND = 0, 1, 2


# Messages this large are announced to the NIC as soon as they are written rather than
# at the end of their batch: the NIC's copy of one overlaps the GPU's writing of the next.
RING_EACH_BYTES = 65536
# Pushes and host_staged writes of at most this many bytes (that no one-thread post takes)
# are posted by the first warp alone, with warp barriers: a block barrier after stores to host
# memory costs 0.2 to 0.5 us on an H200 (BENCHMARKS.md, run 13), and one warp's unrolled
# round moves 2 KiB (32 lanes x 4 vectors x 16 bytes), so up to there the block's other
# warps have no vector of their own to copy.
WARP_PUSH_BYTES = 2048
# The simulator's warp barrier is the block's (intrinsics.warp_sync): there the warp path
# is taken only where the block is one warp.
WARP_PATH_ANY_BLOCK = not SIMULATOR
# Bound here as globals: cuda.shared.array needs shapes Numba sees as constants, and
# a module attribute (dv.QP_STATE_SHAPE) inside the kernel is not one.
QP_STATE_SHAPE = dv.QP_STATE_SHAPE
QP_INFO_SHAPE = dv.QP_INFO_SHAPE


@cuda.jit(device=True)
def _reap(q, pend, i, t_done, head, tail):
    """Stamps the completion time of every batch the CQ has retired."""
    done = q[dv.Q_STATE][0, dv.S_DONE]
    now = globaltimer_ns()
    cap = pend.shape[1]
    while head < tail and pend[i, head & (cap - 1), 0] <= done:
        for m in range(pend[i, head & (cap - 1), 1], pend[i, head & (cap - 1), 2]):
            t_done[m] = now
        head += 1
    return head


MAX_REGISTERS = dv.MAX_REGISTERS
MAX_BLOCK_THREADS = 65536 // MAX_REGISTERS
_LIMITS = dv.KERNEL_OPTIONS


# push_mid's (staged_mid's, inline_mid's) shared buffer: the words of a payload past its
# first 128 bytes, 16-byte aligned for cp.async. The simulator takes no alignment (its numpy
# arrays are aligned, and its cp_async16 checks). Bound here for cuda.shared.array, as
# QP_STATE_SHAPE below.
MID_BUF_WORDS = dv.MID_BUF_WORDS


def _send_messages(path: int, scope: int = BLOCK):
    """``send_messages`` for one path (``PUSH`` .. ``STAGED``) and one scope (``BLOCK`` or
    ``THREAD``), both compile-time constants (``kernel_scope`` says which scope a table
    needs): with ``THREAD`` every thread but 0 leaves after the set-up and no barrier is
    taken per message."""

    @cached
    @cuda.jit(**_LIMITS)
    def send_messages(Q, msgs, qp_first, src, params, t_post, t_done, result, pend):
        i = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        # sh[0], sh[1]: thread 0's reservation outcome (status, word), read by the block between
        # two barriers. sh[2 + (m & 1)]: message m's status, published at the end of its
        # iteration; alternating slots let thread 0 publish message m + 1's before every thread
        # has read message m's (small pushes take no barrier in between).
        sh = cuda.shared.array(4, dtype=int64)
        # The last bytes of a mid payload (push_mid, staged_mid, inline_mid), read by
        # cp.async before its bookkeeping.
        if SIMULATOR:
            mid = cuda.shared.array(MID_BUF_WORDS, dtype=uint32)
        else:
            mid = cuda.shared.array(MID_BUF_WORDS, dtype=uint32, alignment=16)
        # The block owns QP i: its bookkeeping lives in shared memory while the kernel runs.
        sh_state = cuda.shared.array(QP_STATE_SHAPE, dtype=int64)
        sh_info = cuda.shared.array(QP_INFO_SHAPE, dtype=int64)
        if tid == 0:
            dv.qp_cache_load(Q, i, sh_state, sh_info)
        cuda.syncthreads()
        if scope == THREAD and tid != 0:
            return
        q = dv.qp_cached(Q, i, sh_state, sh_info)
        # The path is a constant: the other paths' code is dropped. With the path a kernel
        # argument, one kernel for all, it spilled 88 bytes at 128 registers (ptxas of
        # CUDA 13.0, sm_90) and took 0.1 to 0.3 us longer per message from 64 B to 4 KiB
        # on an H100 (BENCHMARKS.md, session 24).
        batch = params[P_BATCH]
        timeout = params[P_TIMEOUT_NS]
        chunk = params[P_CHUNK_BYTES]
        # Every parameter is loaded once, here: a completion wait's system-scope acquire loads
        # empty the L1 cache, so a load of params inside the loop is an L2 trip per message
        # (0.2 to 0.4 us on an H100, BENCHMARKS.md session 9), on the latency path.
        dst_addr = params[P_DST_ADDR]
        rkey = params[P_RKEY]
        src_addr = params[P_SRC_ADDR]
        src_lkey = params[P_SRC_LKEY]
        wait_each = params[P_WAIT_EACH] != 0
        m0 = qp_first[i]
        m1 = qp_first[i + 1]
        state = q[dv.Q_STATE]
        cap = pend.shape[1]     # a power of two: pend is indexed with masks, not divisions
        head = 0
        tail = 0
        batch_first = m0
        status = 0
        m = m0
        while m < m1 and status == 0:
            size = msgs[m, M_SIZE]
            src0 = msgs[m, M_SRC_WORD]
            dst0 = msgs[m, M_DST_OFF]
            # A message's clock starts once its row of the table is in registers: loading the
            # row (a miss to GPU memory, about 0.6 us on an H100) is the runner's bookkeeping,
            # not the path's; an application has its message's size and addresses at hand.
            # Branching on the three values makes the stamp wait for their loads.
            if tid == 0 and (size | src0 | dst0) >= 0:
                t_post[m] = globaltimer_ns()
            end_of_batch = m - batch_first + 1 == batch or m == m1 - 1 or wait_each
            off = 0
            while off < size and status == 0:
                n = size - off
                if path != INLINE and n > chunk:
                    n = chunk
                last = off + n >= size
                # Chunks of a split message, and every host_staged WQE, are signaled: their
                # completions free bounce space and SQ space that later chunks wait for
                # (gpu_push adds its own, dv.stage_signal, where staging credits need them).
                signaled = (end_of_batch and last) or not last or path == STAGED
                src_word = src0 + off // 4
                raddr = dst_addr + dst0 + off
                # gpu_push and host_staged write their payloads into host-visible memory the
                # same way (one thread, the first warp, the block, by size); they differ in
                # the ring it goes to and the NIC's reading of it.
                pushed = path == PUSH or path == STAGED
                small = False
                one_thread = False
                if path != PULL:
                    small = dv.push_small_ok(src, src_word, n)
                    one_thread = small or dv.push_mid_ok(src, src_word, n)
                if one_thread:
                    # One thread posts it, with 16-byte stores and no barrier: a block
                    # barrier after stores to host memory costs 0.2 to 0.5 us on an H200
                    # (run 13), and on an H100 one thread is 0.2 us faster than the first
                    # warp at 128 B and 0.03 to 0.06 at 256 B (BENCHMARKS.md, session 26).
                    if tid == 0:
                        if small and path == STAGED:
                            status = dv.staged_small(q, 0, src, src_word, n, raddr, rkey,
                                                     timeout)
                        elif small:
                            status = dv.post_small(q, 0, path == INLINE, src, src_word, n, raddr,
                                                   rkey, signaled, timeout)
                        elif path == STAGED:
                            status = dv.staged_mid(q, 0, src, src_word, n, raddr, rkey, timeout,
                                                   mid)
                        elif path == INLINE:
                            status = dv.inline_mid(q, 0, src, src_word, n, raddr, rkey, signaled,
                                                   timeout, mid)
                        else:
                            status = dv.push_mid(q, 0, src, src_word, n, raddr, rkey, signaled,
                                                 timeout, mid)
                        if status == 0 and not last:
                            dv.flush_doorbell(q, 0)
                    off += n
                    continue
                if scope == THREAD:
                    # The table was checked on the host (kernel_scope); a message thread 0
                    # cannot post alone fails here rather than waiting for threads that
                    # have left.
                    status = dv.E_NOT_ALONE
                    break
                if pushed and n <= WARP_PUSH_BYTES and \
                        (WARP_PATH_ANY_BLOCK or cuda.blockDim.x <= 32):
                    # The first warp posts it: lane 0 claims the space, the lanes copy, lane 0
                    # writes the header and WQE, and a warp barrier orders all of it before
                    # lane 0's doorbell. Nothing goes to host memory before the first
                    # barrier (a barrier after such a store waits for it, run 13); against
                    # the header and WQE written before it, no size moved one way in every
                    # round (H200, BENCHMARKS.md, session 37).
                    if tid < 32:
                        lanes = min(32, cuda.blockDim.x)
                        # The payload's loads go first: their latency hides behind lane 0's
                        # bookkeeping (a block of fewer lanes than it needs copies later).
                        pre = preload_fits(n, lanes)
                        x = preload(src, src_word, n if pre else 0, tid, lanes)
                        first = 0
                        slots = 0
                        if tid == 0:
                            if path == STAGED:
                                st, word = dv.staged_claim(q, 0, n, timeout)
                            else:
                                st, word, first, slots = dv.push_claim(q, 0, n, timeout)
                            sh[0] = st
                            sh[1] = word
                        warp_sync(lanes)
                        status = sh[0]
                        word = sh[1]
                        ring = q[dv.Q_BOUNCE][0] if path == STAGED else q[dv.Q_STAGE][0]
                        if status == 0 and pre:
                            store_preloaded(ring, word, x, n, tid, lanes)
                        elif status == 0:
                            copy_bytes(ring, word, src, src_word, n, tid, lanes)
                        if tid == 0 and status == 0 and path == STAGED:
                            dv.staged_describe(q, 0, word, n, raddr, rkey)
                        elif tid == 0 and status == 0:
                            dv.push_describe(q, 0, first, n, slots, raddr, rkey, signaled)
                        warp_sync(lanes)
                        if tid == 0 and status == 0 and not last:
                            dv.flush_doorbell(q, 0)
                    off += n
                    continue
                # Payloads the block can hold in registers are loaded before thread 0 reserves
                # space for them, as push_small does: the loads' latency hides behind it.
                pre = (path == PUSH or path == STAGED) and preload_fits(n, cuda.blockDim.x)
                x = preload(src, src_word, n if pre else 0, tid, cuda.blockDim.x)
                first = 0
                slots = 0
                if tid == 0:
                    # Only claims before the barrier, as in the first warp's path: the header
                    # and WQE are written after the payload.
                    word = 0
                    if path == PUSH:
                        st, word, first, slots = dv.push_claim(q, 0, n, timeout)
                    elif path == STAGED:
                        st, word = dv.staged_claim(q, 0, n, timeout)
                    else:
                        st = dv.sq_reserve(q, 0, dv.inline_bbs(n) if path == INLINE else 1,
                                           timeout)
                    sh[0] = st
                    sh[1] = word
                cuda.syncthreads()
                status = sh[0]
                if status != 0:
                    break
                word = sh[1]
                cuda.syncthreads()  # every thread has read sh before thread 0 writes it again
                # The block copies the payload; thread 0 writes the WQE alone. Measured on an
                # H200, a barrier after stores to host memory costs 0.2 to 0.5 us, more than
                # thread 0 takes to store the 16 words of a WQE (BENCHMARKS.md, run 13).
                if path == PUSH or path == STAGED:
                    # The payload goes to the staging region (gpu_push) or the bounce ring.
                    ring = q[dv.Q_STAGE][0] if path == PUSH else q[dv.Q_BOUNCE][0]
                    if pre:
                        store_preloaded(ring, word, x, n, tid, cuda.blockDim.x)
                    else:
                        copy_bytes(ring, word, src, src_word, n, tid, cuda.blockDim.x)
                    cuda.syncthreads()
                    if tid == 0 and path == PUSH:
                        dv.push_describe(q, 0, first, n, slots, raddr, rkey, signaled)
                    elif tid == 0:
                        dv.staged_describe(q, 0, word, n, raddr, rkey)
                elif path == PULL:
                    if tid == 0:
                        dv.wqe_rdma_write(q, 0, src_addr + src_word * 4, src_lkey, n, raddr, rkey,
                                          signaled, 0)
                else:
                    dv.wqe_rdma_write_inline(q, 0, src, src_word, n, raddr, rkey, signaled)
                if tid == 0 and (not last or n >= RING_EACH_BYTES):
                    dv.flush_doorbell(q, 0)
                off += n
            if status == 0 and end_of_batch and tid == 0:
                dv.flush_doorbell(q, 0)
                slot = tail & (cap - 1)
                pend[i, slot, 0] = state[0, dv.S_PI]
                pend[i, slot, 1] = batch_first
                pend[i, slot, 2] = m + 1
                tail += 1
                if wait_each or tail - head >= cap:
                    status = dv.wait_done(q, 0, state[0, dv.S_PI], timeout)
                else:
                    # One non-blocking poll per batch (one CQE per batch is produced), so that
                    # completion times are stamped when they happen, not when space runs out.
                    polled = dv.poll_cq(q, 0)
                    if polled < 0:
                        status = polled
                head = _reap(q, pend, i, t_done, head, tail)
            if status == 0 and end_of_batch:
                batch_first = m + 1     # every thread: end_of_batch decides which WQEs signal
            if scope == BLOCK:
                if tid == 0:
                    sh[2 + (m & 1)] = status
                cuda.syncthreads()
                status = sh[2 + (m & 1)]
            m += 1
        if tid == 0:
            if status == 0:
                dv.flush_doorbell(q, 0)
                status = dv.wait_done(q, 0, state[0, dv.S_PI], timeout)
            head = _reap(q, pend, i, t_done, head, tail)
            result[i, R_STATUS] = status
            result[i, R_SENT] = m - m0
            result[i, R_SYND] = state[0, dv.S_LAST_SYND]
            dv.qp_cache_store(Q, i, sh_state)

    return send_messages


_BY_PATH: dict = {}


def send_messages_for(path: str, scope: str = "block"):
    """``send_messages`` made for ``path`` and ``scope`` (compiled on first use, then
    cached): the kernel the runners launch. ``scope`` "block" takes any table; "thread"
    only the tables ``kernel_scope`` gives it (another message fails with ``E_NOT_ALONE``)."""
    if scope not in SCOPE_IDS:
        raise ValueError(f"scope={scope!r}: allowed {', '.join(SCOPE_IDS)}")
    if path not in SCOPE_PATHS[scope]:
        raise ValueError(f"scope={scope!r} on path={path!r}: that scope is made for "
                         f"{', '.join(SCOPE_PATHS[scope])}")
    # A block kernel is cached under its path alone (the benchmark scripts' A/B variants
    # are put there in its place, with kernel_scope answering "block").
    key = path if scope == "block" else (path, scope)
    if key not in _BY_PATH:
        _BY_PATH[key] = _send_messages(PATH_IDS[path], SCOPE_IDS[scope])
    return _BY_PATH[key]


def kernel_scope(path: str, msgs, src_address: int, chunk_bytes: int) -> str:
    """The narrower scope of ``send_messages`` that posts every message of the table
    ``msgs`` (rows of ``M_SIZE``, ``M_SRC_WORD``, ``M_DST_OFF``; the source at byte
    ``src_address``) on ``path``: "thread" where every message is one WQE thread 0 posts
    alone (the verbs' own tests, ``dv.push_small_fits`` and ``dv.push_mid_fits``, which
    every path but nic_pull shares, asked of the whole table at once), else "block" (and
    for every nic_pull table, whose WQEs are the block's)."""
    if path == "nic_pull" or len(msgs) == 0:
        return "block"
    table = np.asarray(msgs, dtype=np.int64)
    size = table[:, M_SIZE]
    address = src_address + 4 * table[:, M_SRC_WORD]
    one = dv.push_small_fits.py_func(size) | dv.push_mid_fits.py_func(size, address)
    return "thread" if np.all(one & (size <= chunk_bytes)) else "block"


def kernel_for(path: str, msgs, src_address: int, chunk_bytes: int):
    """The kernel the runners launch for the table ``msgs`` on ``path`` (emulated mode's
    and the testbed's alike): returns (``kernel_scope``'s answer, ``send_messages_for``
    that path and scope)."""
    scope = kernel_scope(path, msgs, src_address, chunk_bytes)
    return scope, send_messages_for(path, scope)
