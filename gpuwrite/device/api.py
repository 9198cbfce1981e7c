"""Put, signal, quiet: the device API a researcher's own kernel calls.

The layer between the bus-step verbs (:mod:`gpuwrite.device.verbs`) and kernels, in the
shape NVSHMEM and NCCL's device API give CUDA C++ kernels: open a QP at a scope, ``put``
bytes to a remote address, ``put_signal`` when a receiver polls for them, ``quiet`` to
wait for completion. The data path is an argument of each put, or ``AUTO``: the host's
size thresholds (``Thresholds``) pick it per message.

Kernel side (every function is called by every thread of the scope, with the same
arguments, unless it says otherwise)::

    sh = cuda.shared.array(SLOTS, int64)     # SLOTS = api.slots_shape(warps), a global
    h = api.open_warp(Q, cfg, qp, sh)        # or open_block / open_thread
    st = api.put(h, src, src_word, nbytes, raddr, rkey, lkey, api.AUTO)
    st = api.put_signal(h, ..., sig_raddr, sig_rkey, sig_value)
    st = api.quiet(h)                        # every earlier put of this QP completed
    api.close(h)                             # announce what is left, keep the QP's state

Scopes: a *block* drives the QP (thread 0 keeps the books, the block copies payloads);
a *warp* drives it (lane 0 keeps the books; blocks must be whole warps), so a block of
``k`` warps drives ``k`` QPs; a *thread* drives it alone (for small payloads: one thread
copies everything). Each handle keeps its QP's state in one row of ``sh``.

Semantics:
  * ``put`` is non-blocking: it returns once the payload is in staging, bounce or SQ
    memory (or, for nic_pull, once the WQE is written: the source must not change until
    ``quiet``). Doorbells are batched: a put rings only for a message of at least
    ``ring_each_bytes`` or between the chunks of a split one; ``quiet``, ``flush``,
    ``close``, ``put_signal`` and every wait ring first.
  * ``put_signal`` posts, after the data, an 8-byte RDMA write of ``sig_value`` (inline,
    signaled, with the mlx5 fence flag). The receiver sees the signal only after every
    byte of the data, and of every earlier put on the QP: the emulated NIC delivers a
    QP's WQEs strictly in order (gw_service.c, ``progress``); a real mlx5 NIC executes
    a reliable-connected QP's RDMA writes in order and writes them to the responder's
    memory as PCIe posted writes, which PCIe keeps in order, so this holds as long as
    the destination region is not registered with relaxed ordering
    (IBV_ACCESS_RELAXED_ORDERING), which lets those writes pass each other. On nic_pull
    with the GPU pull agent, the bytes of two puts of a QP that do not overlap may become
    visible in either order before their completions (the agent copies a batch of small
    pulls a warp each); the signal, placed by the engine only once every earlier pull of
    the QP has been answered, is not affected.
  * ``quiet`` waits until every WQE posted on the QP has completed. It makes sure the
    last one asks for a completion (completions retire every WQE before the one they
    name): if it did not, its control segment's CQ_UPDATE bit is set before the doorbell
    announces it.
  * Status codes are the verbs' (``gpuwrite.device.verbs.E_*``), plus ``E_BAD_PATH``,
    ``E_BAD_SIZE``, ``E_BAD_SOURCE``, ``E_CLOSED``, ``E_BAD_QP`` (an ``open_*`` of a QP
    index outside ``Q``: the handle fails at once) and ``wait_signal``'s
    ``E_TIMEOUT_SIGNAL``.
    An error is sticky: once a put or a wait of a handle fails, every later call on
    it returns the first error without touching the QP (``error_name`` names it;
    ``Session.qp_errors`` adds the syndrome of an error completion).

Host side: :class:`Session` builds what kernels need (the queues' tuple ``Q``, the
configuration array ``cfg`` with the timeout and the auto thresholds, registered send
and receive buffers).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import numpy as np
from numba import uint32
from numba.core.errors import TypingError

from gpuwrite import layouts as L
from gpuwrite.calibfiles import calibration_dir, newest_first
from gpuwrite._gw_cffi import lib
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device import verbs as dv
from gpuwrite.device.verbs import KERNEL_OPTIONS  # noqa: F401  (re-exported: @cuda.jit(**api.KERNEL_OPTIONS))
# Re-exported: -1 to -7 are the verbs' own (a put returns what its post or wait returned).
from gpuwrite.device.verbs import (E_CQE_ERROR, E_QP_ERROR, E_TIMEOUT_BOUNCE,  # noqa: F401
                                   E_TIMEOUT_CQE, E_TIMEOUT_SQ, E_TIMEOUT_STAGING, E_TOO_LARGE)
from gpuwrite.device.copy import copy_bytes as _copy_bytes   # 16-byte vectors (issue 14)
from gpuwrite.device.intrinsics import (address_of, backoff, bswap32, globaltimer_ns,
                                        ld_acquire_sys_u32, st_relaxed_sys_u32, st_v4_u32)

# -- paths and scopes -----------------------------------------------------------------
# The same numbers as gpuwrite.paths.kernels.PATH_IDS (a test checks).
GPU_PUSH, GPU_PUSH_INLINE, NIC_PULL, HOST_STAGED, AUTO = range(5)
PATH_IDS = {"gpu_push": GPU_PUSH, "gpu_push_inline": GPU_PUSH_INLINE, "nic_pull": NIC_PULL,
            "host_staged": HOST_STAGED, "auto": AUTO}
PATH_NAMES = {v: k for k, v in PATH_IDS.items()}
SCOPE_THREAD, SCOPE_WARP, SCOPE_BLOCK = range(3)
WARP_THREADS = 32

# -- status codes -----------------------------------------------------------------------
OK = dv.OK
E_BAD_PATH = -16        # a path number that is none of GPU_PUSH .. AUTO
E_TIMEOUT_SIGNAL = -17  # wait_signal: the signal did not reach its value in time
E_BAD_SIZE = -18        # a negative message size
E_BAD_SOURCE = -19      # the payload's words run outside the source array
E_CLOSED = -20          # a put, flush or quiet on a handle after its close
E_BAD_QP = -21          # open_* given a QP index outside the session's QPs
ERROR_NAMES = dict(dv.ERROR_NAMES)
ERROR_NAMES[dv.E_TOO_LARGE] = ("message too large for the staging ring, the bounce ring, an inline "
                               "WQE or (nic_pull) one WQE")
ERROR_NAMES[E_BAD_PATH] = "unknown path number (allowed 0 to 4: api.PATH_IDS)"
ERROR_NAMES[E_TIMEOUT_SIGNAL] = "timed out waiting for a signal"
ERROR_NAMES[E_BAD_SIZE] = "negative message size (allowed: 0 or more bytes)"
ERROR_NAMES[E_BAD_SOURCE] = ("source range outside the source array (allowed: src_word >= 0 "
                             "and src_word * 4 + nbytes <= 4 * len(src))")
ERROR_NAMES[E_CLOSED] = "the handle was closed (open the QP again to use it)"
ERROR_NAMES[E_BAD_QP] = ("QP index outside the session's QPs (allowed: 0 <= qp < n_qps, the rows "
                         "of Q)")


def error_name(status: int) -> str:
    """What a status code returned by put/put_signal/quiet means."""
    return ERROR_NAMES.get(int(status), f"unknown status {int(status)}")


# -- the configuration array (int64) the host hands to kernels ---------------------------
C_TIMEOUT_NS = 0       # every wait gives up after this long
C_CHUNK_BYTES = 1      # gpu_push / host_staged messages go as WQEs of at most this size
C_RING_EACH_BYTES = 2  # a WQE this large is announced at once (overlaps the next copy)
C_NRULES = 3           # auto: rules in use
C_RULES = 4            # auto: (max_bytes, path) pairs, smallest max first
MAX_RULES = 8
MAX_RULE_BYTES = 1 << 62    # a rule's largest max_bytes (Thresholds.fixed's: every message)
C_COLS = C_RULES + 2 * MAX_RULES

# -- a handle's rows in the kernel's shared array ---------------------------------------
# Two rows of ROW_COLS per handle: [QP state (verbs S_*)] and [QP description (verbs I_*) |
# this layer's columns (A_*)]. Each row is a slice of the array's leading dimensions only,
# so it keeps Numba's C layout. A slice of some columns of a row would have layout 'A', and
# NVVM then reaches it through generic addresses (ld.u64, not ld.shared.u64): 296 generic
# loads in put_latency's PTX (BENCHMARKS.md session 10), each one also reloaded around every
# memory-clobbering intrinsic.
_A0 = dv.I_COLS
A_QP = 0        # the QP's row in Q
A_STATUS = 1    # sticky: the first error of this handle (leader only)
A_SIG_END = 2   # producer index just after the last WQE that asks for a completion
A_BC_ST = 3     # the leader's status, broadcast to the scope
A_BC_WORD = 4   # the leader's reserved word, broadcast to the scope
A_TIMEOUT_NS = 5    # cfg[C_TIMEOUT_NS], C_CHUNK_BYTES and C_RING_EACH_BYTES, copied at open
A_CHUNK_BYTES = 6   # by the leader, for every thread of the scope to read once into the
A_RING_EACH_BYTES = 7   # handle (the scope travels there too: no column)
A_COLS = 8
ROW_COLS = max(dv.S_COLS, _A0 + A_COLS)


def slots_shape(n_handles: int) -> tuple[int, int, int]:
    """Shape of the shared int64 array for ``n_handles`` handles open at once in a block
    (one per warp for warp scope). Bind it to a module global: shared-array shapes must
    be compile-time constants."""
    if n_handles < 1:
        raise ValueError(f"n_handles={n_handles}: at least 1")
    return (int(n_handles), 2, ROW_COLS)


# Header-derived constants bound as globals (compile-time constants in kernels).
_BB_WORDS = L.WQE_BB // 4
_W_FLAGS = L.CTRL_W_FLAGS
_W_DATA = L.DATA_BASE // 4
_FM_SHIFT = 8 * L.CTRL_FM_CE_SE_BYTE
_CE = L.CTRL_CQ_UPDATE
_FENCE = lib.GW_WQE_CTRL_FENCE     # layouts.py exports no name for it
_OP_WRITE = L.OPCODE_RDMA_WRITE
_INLINE_FLAG = L.INLINE_SEG_FLAG
_MAX_INLINE = L.MAX_INLINE_BYTES
SIGNAL_BYTES = 8
# The most bytes one RDMA-write WQE carries (mlx5's largest message, 2^31; the emulated
# NIC fails a larger one with a length error). Only nic_pull posts a message as one WQE
# whatever its size; the others split it into chunk_bytes, which the rings bound.
MAX_WQE_BYTES = (1 << 31) - 1


# -- scope plumbing ---------------------------------------------------------------------
if SIMULATOR:
    import threading
    import weakref

    _warp_barriers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    _warp_lock = threading.Lock()

    def _syncwarp():
        """The simulator's twin of ``__syncwarp()``: a barrier of the calling thread's
        warp (the simulator has none; its threads are Python threads of one block)."""
        me = threading.current_thread()
        manager = me._manager
        dims = manager._block_dim
        threads = dims[0] * dims[1] * dims[2]
        warp = me.thread_id // WARP_THREADS
        with _warp_lock:
            per_block = _warp_barriers.setdefault(manager, {})
            barrier = per_block.get(warp)
            if barrier is None:
                barrier = per_block[warp] = threading.Barrier(
                    min(WARP_THREADS, threads - warp * WARP_THREADS))
        barrier.wait(timeout=600)

    def _warp_bcast(a, leader, status, word):
        """Lane 0's (status, word) on every lane, through shared memory (the simulator
        has no shuffle); the second barrier keeps lane 0 from writing the next one
        before every lane has read."""
        if leader:
            a[A_BC_ST] = status
            a[A_BC_WORD] = word
        _syncwarp()
        st, w = a[A_BC_ST], a[A_BC_WORD]
        _syncwarp()
        return st, w
else:
    @cuda.jit(device=True, inline=True)
    def _syncwarp():
        """Barrier of the warp; orders the lanes' memory accesses (``bar.warp.sync``)."""
        cuda.syncwarp(0xFFFFFFFF)

    @cuda.jit(device=True, inline=True)
    def _warp_bcast(a, leader, status, word):
        """Lane 0's (status, word) on every lane: a register shuffle, no barrier. A
        barrier right after lane 0's stores to host memory waits for them (0.2 to 0.5 us
        on an H200, BENCHMARKS.md run 13), which a put of a small payload, posted whole
        by lane 0, would otherwise pay on every call."""
        return cuda.shfl_sync(0xFFFFFFFF, status, 0), cuda.shfl_sync(0xFFFFFFFF, word, 0)


def _words_refused(what: str) -> str:
    return (f"put/put_signal: src is {what}; allowed a 1-D array of uint32 words (the copies "
            "move 16-byte vectors of words: view a byte buffer as uint32, its length a "
            "multiple of 4)")


if SIMULATOR:
    def _require_words(src):
        """The simulator's twin of the GPU's typing check: a kernel fails at the put."""
        if getattr(src, "dtype", None) != np.uint32 or getattr(src, "ndim", None) != 1:
            raise TypingError(_words_refused(
                f"dtype {getattr(src, 'dtype', type(src).__name__)}, "
                f"{getattr(src, 'ndim', 0)}-D"))
else:
    from numba.core import types as _types
    from numba.core.extending import intrinsic

    @intrinsic
    def _require_words(typingctx, src):
        """No code: refuses, when the kernel is compiled, a source that is not 1-D uint32
        (its copies would make misaligned vector loads)."""
        if not (isinstance(src, _types.Array) and src.dtype == _types.uint32 and src.ndim == 1):
            what = (f"dtype {src.dtype}, {src.ndim}-D" if isinstance(src, _types.Array)
                    else f"of type {src}")
            raise TypingError(_words_refused(what))

        def codegen(context, builder, signature, args):
            return context.get_dummy_value()

        return _types.none(src), codegen


@cuda.jit(device=True)
def _sync(scope):
    """Barrier of the scope: what makes the lanes' payload stores part of what the
    leader's doorbell release store orders (release is cumulative over a barrier)."""
    if scope == SCOPE_BLOCK:
        cuda.syncthreads()
    elif scope == SCOPE_WARP:
        _syncwarp()


@cuda.jit(device=True)
def _rank(scope):
    """(rank, ranks) of the calling thread in its scope."""
    if scope == SCOPE_BLOCK:
        return cuda.threadIdx.x, cuda.blockDim.x
    if scope == SCOPE_WARP:
        return cuda.threadIdx.x & (WARP_THREADS - 1), WARP_THREADS
    return 0, 1


# -- opening and closing ----------------------------------------------------------------
@cuda.jit(device=True)
def _open(Q, cfg, qp, sh, slot, scope, leader):
    state_row = sh[slot, 0:1]
    info_row = sh[slot, 1:2]
    a = sh[slot, 1, _A0:]
    # An index outside Q's rows would read and write past every ring (qp_cached's slices
    # are then empty): the handle fails instead. Its slices are QP 0's, never touched
    # while the status is not OK; close stores no state for it.
    bad_qp = qp < 0 or qp >= Q[dv.Q_STATE].shape[0]
    row = 0 if bad_qp else qp
    if leader:
        if bad_qp:
            a[A_STATUS] = E_BAD_QP
        else:
            dv.qp_cache_load(Q, qp, state_row, info_row)
            a[A_STATUS] = OK
        a[A_QP] = row
        a[A_TIMEOUT_NS] = cfg[C_TIMEOUT_NS]
        a[A_CHUNK_BYTES] = cfg[C_CHUNK_BYTES]
        a[A_RING_EACH_BYTES] = cfg[C_RING_EACH_BYTES]
        # A QP left by ``close`` (or never used) asks for a completion at its last WQE.
        a[A_SIG_END] = state_row[0, dv.S_PI]
    _sync(scope)
    # What stays fixed while the handle is open travels in registers, in the handle: the
    # scope (a constant where the kernel opened with open_warp, open_block or open_thread,
    # so the compiler drops the other scopes' branches), the timeout, the chunk size and
    # the ring-each size (read once here; the leader copied them from cfg).
    return (Q, dv.qp_cached(Q, row, state_row, info_row), a, cfg, scope, a[A_TIMEOUT_NS],
            a[A_CHUNK_BYTES], a[A_RING_EACH_BYTES])


@cuda.jit(device=True)
def open_block(Q, cfg, qp, sh):
    """The block drives QP ``qp`` (row 0 of ``sh``); every thread of the block calls."""
    return _open(Q, cfg, qp, sh, 0, SCOPE_BLOCK, cuda.threadIdx.x == 0)


@cuda.jit(device=True)
def open_warp(Q, cfg, qp, sh):
    """The calling warp drives QP ``qp`` (row ``threadIdx.x // 32`` of ``sh``); every
    lane calls. Blocks must be whole warps; other warps may drive other QPs."""
    return _open(Q, cfg, qp, sh, cuda.threadIdx.x // WARP_THREADS, SCOPE_WARP,
                 (cuda.threadIdx.x & (WARP_THREADS - 1)) == 0)


@cuda.jit(device=True)
def open_scope(Q, cfg, qp, sh, scope):
    """``open_block`` or ``open_warp`` by ``scope`` (SCOPE_BLOCK or SCOPE_WARP), a value known
    only at run time. One call, not one per branch: a handle chosen between two opens
    reaches its shared rows through generic addresses (NVVM does not follow the address
    space through the branches' merge), which costs every later put."""
    warp = scope == SCOPE_WARP
    lane = cuda.threadIdx.x & (WARP_THREADS - 1) if warp else cuda.threadIdx.x
    return _open(Q, cfg, qp, sh, cuda.threadIdx.x // WARP_THREADS if warp else 0, scope,
                 lane == 0)


@cuda.jit(device=True)
def open_thread(Q, cfg, qp, sh, slot):
    """The calling thread alone drives QP ``qp``, in row ``slot`` of ``sh``."""
    return _open(Q, cfg, qp, sh, slot, SCOPE_THREAD, True)


@cuda.jit(device=True)
def _flush(h):
    """Announces every WQE written so far (leader only). The last one asks for a
    completion first, so that a wait on it can end: its CQ_UPDATE bit is set while
    the NIC cannot see it yet."""
    Q, q, a, cfg, scope, timeout_ns, chunk_bytes, ring_each_bytes = h
    state = q[dv.Q_STATE]
    pi = state[0, dv.S_PI]
    if pi == state[0, dv.S_DB_PI]:
        return
    if a[A_SIG_END] != pi:
        base = (state[0, dv.S_LAST_PI] & (q[dv.Q_INFO][0, dv.I_SQ_BBS] - 1)) * _BB_WORDS
        st_relaxed_sys_u32(q[dv.Q_SQ][0], base + _W_FLAGS, _CE << _FM_SHIFT)
        a[A_SIG_END] = pi
        # A patched push's completion returns every staging slot claimed up to it, as a
        # push signaled when posted does: staging's count of slots claimed since the last
        # signaled push (``dv.stage_signal``) restarts there too. Left running, it asked
        # for a second completion in every batch of 16 streamed 64-byte puts (200 puts on
        # the simulator: 26 completions where send_messages asked 13; session 31).
        aux = state[0, dv.S_LAST_AUX]
        if aux & dv.AUX_STAGE:
            state[0, dv.S_STAGE_SIG] = aux & dv.AUX_CURSOR
    dv.ring_doorbell(q, 0)


@cuda.jit(device=True)
def _broadcast(a, scope, leader, status, word):
    """The leader's (status, word) on every thread of the scope. At block scope the
    caller's next barrier keeps the leader from writing the next broadcast before all
    have read; a warp's needs none."""
    if scope == SCOPE_THREAD:
        return status, word
    if scope == SCOPE_WARP:
        return _warp_bcast(a, leader, status, word)
    if leader:
        a[A_BC_ST] = status
        a[A_BC_WORD] = word
    _sync(scope)
    return a[A_BC_ST], a[A_BC_WORD]


@cuda.jit(device=True)
def _announce(h, wait):
    """Rings for every put not yet announced and, if ``wait``, waits for all of them."""
    Q, q, a, cfg, scope, timeout_ns, chunk_bytes, ring_each_bytes = h
    rank, nranks = _rank(scope)
    st = OK
    if rank == 0:
        st = a[A_STATUS]
        if st == OK:
            _flush(h)
            if wait:
                st = dv.wait_done(q, 0, q[dv.Q_STATE][0, dv.S_PI], timeout_ns)
                a[A_STATUS] = st
    st, w = _broadcast(a, scope, rank == 0, st, 0)
    _sync(scope)
    return st


@cuda.jit(device=True)
def flush(h):
    """Rings the doorbell for every put not yet announced; returns the handle's status."""
    return _announce(h, False)


@cuda.jit(device=True)
def quiet(h):
    """Waits until every put of this handle's QP has completed; returns OK or the first
    error (a timeout after ``cfg[C_TIMEOUT_NS]``, an error completion, a QP in error)."""
    return _announce(h, True)


@cuda.jit(device=True)
def close(h):
    """Announces what is left and writes the QP's state back for the next kernel (it
    does not wait: call ``quiet`` first to know that everything arrived). Later calls on
    the handle return ``E_CLOSED`` (or its earlier error) without touching the QP: what
    they posted would be missing from the state the next kernel starts from."""
    Q, q, a, cfg, scope, timeout_ns, chunk_bytes, ring_each_bytes = h
    if _rank(scope)[0] == 0:
        if a[A_STATUS] == OK:
            _flush(h)
            dv.qp_cache_store(Q, a[A_QP], q[dv.Q_STATE])
            a[A_STATUS] = E_CLOSED
        elif a[A_STATUS] != E_CLOSED and a[A_STATUS] != E_BAD_QP:
            dv.qp_cache_store(Q, a[A_QP], q[dv.Q_STATE])
    _sync(scope)


@cuda.jit(device=True)
def status_of(h):
    """The handle's sticky status, as the leader sees it (call on the leader); after
    ``close``, ``E_CLOSED`` where it had no error."""
    return h[2][A_STATUS]


@cuda.jit(device=True)
def wait_signal(sig_words, slot, value, timeout_ns):
    """Waits (one thread) until signal ``slot`` of a signal region (a uint32 view: two
    words per 8-byte signal, low word first) reaches ``value`` (compared as a counter:
    ``>=``, on the low 32 bits); returns OK or E_TIMEOUT_SIGNAL. Its acquire load orders
    the caller's later loads of the data the signal covers; other threads that read the
    data must synchronise with this one after it returns (a barrier)."""
    start = globaltimer_ns()
    pause = 64
    while ld_acquire_sys_u32(sig_words, 2 * slot) < (value & 0xFFFFFFFF):
        if globaltimer_ns() - start > timeout_ns:
            return E_TIMEOUT_SIGNAL
        backoff(pause)
        pause = min(2 * pause, 1024)
    return OK


# -- path choice --------------------------------------------------------------------------
@cuda.jit(device=True)
def path_for(cfg, nbytes):
    """The path ``AUTO`` takes for a message of ``nbytes``: the first rule whose
    max_bytes is at least ``nbytes`` (the last rule takes everything larger)."""
    n = cfg[C_NRULES]
    for r in range(n):
        if nbytes <= cfg[C_RULES + 2 * r]:
            return cfg[C_RULES + 2 * r + 1]
    return cfg[C_RULES + 2 * (n - 1) + 1]


# -- posting --------------------------------------------------------------------------
@cuda.jit(device=True)
def _post_signal(q, raddr, rkey, value):
    """An inline 8-byte RDMA write of ``value`` (little-endian, as the receiver reads a
    uint64), signaled and fenced (leader; its SQ space is already reserved)."""
    state = q[dv.Q_STATE]
    info = q[dv.Q_INFO]
    pi = state[0, dv.S_PI]
    qpn = info[0, dv.I_QPN]
    sq = q[dv.Q_SQ][0]
    base = (pi & (info[0, dv.I_SQ_BBS] - 1)) * _BB_WORDS
    st_v4_u32(sq, base, bswap32((pi & 0xFFFF) << 8 | _OP_WRITE), bswap32(qpn << 8 | 3),
              uint32((_CE | _FENCE) << _FM_SHIFT), uint32(0))
    dv._raddr(sq, base, raddr, rkey)
    st_v4_u32(sq, base + _W_DATA, bswap32(SIGNAL_BYTES | _INLINE_FLAG),
              uint32(value & 0xFFFFFFFF), uint32((value >> 32) & 0xFFFFFFFF), uint32(0))
    dv._commit_wqe(q, 0, pi, 1, 0, dv._doorbell_value(pi, qpn, 3))


@cuda.jit(device=True)
def _inline_payload(q, src, src_word, nbytes, rank, nranks):
    """The scope's share of an inline WQE's payload, from word _W_DATA + 1 of the WQE at
    the producer index on: one contiguous run, or two where it wraps the ring's end."""
    mask = q[dv.Q_INFO][0, dv.I_SQ_BBS] - 1
    sq = q[dv.Q_SQ][0]
    at = (q[dv.Q_STATE][0, dv.S_PI] & mask) * _BB_WORDS + _W_DATA + 1
    first = min(nbytes, ((mask + 1) * _BB_WORDS - at) * 4)
    _copy_bytes(sq, at, src, src_word, first, rank, nranks)
    _copy_bytes(sq, 0, src, src_word + (first >> 2), nbytes - first, rank, nranks)


@cuda.jit(device=True)
def _inline_segments(q, nbytes, raddr, rkey, signaled):
    """An inline WQE's segments, after its payload (leader)."""
    state = q[dv.Q_STATE]
    info = q[dv.Q_INFO]
    pi = state[0, dv.S_PI]
    qpn = info[0, dv.I_QPN]
    sq = q[dv.Q_SQ][0]
    ds = dv.inline_ds(nbytes)
    base = (pi & (info[0, dv.I_SQ_BBS] - 1)) * _BB_WORDS
    dv._ctrl(sq, base, _OP_WRITE, pi, qpn, ds, signaled)
    dv._raddr(sq, base, raddr, rkey)
    sq[base + _W_DATA] = bswap32(nbytes | _INLINE_FLAG)
    dv._commit_wqe(q, 0, pi, dv.inline_bbs(nbytes), 0, dv._doorbell_value(pi, qpn, ds))


@cuda.jit(device=True)
def _leader_reserve(h, path, src, src_word, n, raddr, rkey, with_sig, sig_raddr, sig_rkey,
                    sig_value, signaled, ring_now, small):
    """The leader's part before the payload copy: the sticky status, SQ space (one more
    BB for a signal), staging slots or bounce words. A small push, host_staged or inline
    write and a signal alone are posted whole here. Returns (status, word)."""
    Q, q, a, cfg, scope, timeout_ns, chunk_bytes, ring_each_bytes = h
    st = a[A_STATUS]
    if st != OK:
        return st, 0
    if path < 0 or path > HOST_STAGED:
        return E_BAD_PATH, 0
    extra = 1 if with_sig else 0
    if n == 0 or small:
        st = OK
        inline = path == GPU_PUSH_INLINE
        if with_sig:
            data_bbs = (dv.inline_bbs(n) if inline else 1) if small else 0
            st = dv.sq_reserve(q, 0, 1 + data_bbs, timeout_ns)
        if st == OK and small and path == HOST_STAGED:
            st = dv.staged_small(q, 0, src, src_word, n, raddr, rkey, timeout_ns)
        elif st == OK and small:
            st = dv.post_small(q, 0, inline, src, src_word, n, raddr, rkey, signaled, timeout_ns)
        if st == OK:
            # Only a posted WQE asks for a completion: a put of 0 bytes posts none, and
            # counting one would leave quiet's wait with no completion to end it.
            _finish(h, signaled and small, ring_now, with_sig, sig_raddr, sig_rkey, sig_value)
        return st, 0
    if path == GPU_PUSH_INLINE and n > _MAX_INLINE:
        return dv.E_TOO_LARGE, 0
    nbb = dv.inline_bbs(n) if path == GPU_PUSH_INLINE else 1
    st = dv.sq_reserve(q, 0, nbb + extra, timeout_ns)
    word = 0
    if st == OK and path == GPU_PUSH:
        st, first, slots = dv.stage_reserve(q, 0, n, timeout_ns)
        if st == OK:
            word = dv.stage_header(q, 0, first, n, slots, q[dv.Q_STATE][0, dv.S_PI])
    elif st == OK and path == HOST_STAGED:
        # Whole 16-byte vectors, as dv.staged_reserve claims them: every run then starts
        # on a vector, where a small put's 16-byte stores can go.
        st, word = dv.bounce_reserve(q, 0, dv.vector_words(n), timeout_ns)
    return st, word


@cuda.jit(device=True)
def _finish(h, signaled, ring_now, with_sig, sig_raddr, sig_rkey, sig_value):
    """After a data WQE (leader): the signal WQE, completion bookkeeping, the doorbell."""
    Q, q, a, cfg, scope, timeout_ns, chunk_bytes, ring_each_bytes = h
    state = q[dv.Q_STATE]
    if signaled:
        a[A_SIG_END] = state[0, dv.S_PI]
    if with_sig:
        _post_signal(q, sig_raddr, sig_rkey, sig_value)
        a[A_SIG_END] = state[0, dv.S_PI]
    if ring_now or with_sig:
        _flush(h)


@cuda.jit(device=True)
def _post(h, path, small, src, src_word, n, raddr, rkey, lkey, last, with_sig, sig_raddr,
          sig_rkey, sig_value):
    """One WQE of ``n`` bytes (a message or a chunk of one), and the signal after it.
    ``small``: a payload ``dv.push_small_ok`` accepts, posted whole by the leader (the caller
    passes a constant, so each call keeps only its own branches)."""
    Q, q, a, cfg, scope, timeout_ns, chunk_bytes, ring_each_bytes = h
    rank, nranks = _rank(scope)
    leader = rank == 0
    st = OK
    word = 0
    signaled = False
    ring_now = False
    if leader:
        state = q[dv.Q_STATE]
        ring_now = (not last) or n >= ring_each_bytes
        # A completion at least every quarter of the SQ: a wait for SQ space always has
        # one to wait for. host_staged's completions return bounce space: all ask. A put
        # on an idle QP asks too: a quiet right after it then needs no CQ_UPDATE patch
        # (one more write to the SQ before the doorbell), and while puts stream the QP
        # is not idle as the kernel sees it (it reads completions only when it waits).
        pi = state[0, dv.S_PI]
        signaled = ring_now or path == HOST_STAGED or pi == state[0, dv.S_DONE] or \
            pi - a[A_SIG_END] >= (q[dv.Q_INFO][0, dv.I_SQ_BBS] >> 2)
        st, word = _leader_reserve(h, path, src, src_word, n, raddr, rkey, with_sig, sig_raddr,
                                   sig_rkey, sig_value, signaled, ring_now, small)
        if st != OK:
            a[A_STATUS] = st
    st, word = _broadcast(a, scope, leader, st, word)
    if st == OK and n > 0 and not small:
        if path == GPU_PUSH:
            _copy_bytes(q[dv.Q_STAGE][0], word, src, src_word, n, rank, nranks)
        elif path == HOST_STAGED:
            _copy_bytes(q[dv.Q_BOUNCE][0], word, src, src_word, n, rank, nranks)
        elif path == GPU_PUSH_INLINE:
            _inline_payload(q, src, src_word, n, rank, nranks)
    # The barrier orders the lanes' payload stores before the leader's doorbell (and, at
    # block scope, ends the broadcast). A small write (any path but nic_pull) is the
    # leader's alone: a warp skips it.
    if not small or scope == SCOPE_BLOCK:
        _sync(scope)
    if leader and st == OK and n > 0 and not small:
        info = q[dv.Q_INFO]
        if path == GPU_PUSH:
            dv.wqe_rdma_write(q, 0, dv.stage_address(q, 0, word), info[0, dv.I_STAGE_LKEY], n,
                              raddr, rkey, dv.stage_signal(q, 0, signaled), dv.stage_aux(q, 0))
        elif path == HOST_STAGED:
            dv.wqe_rdma_write(q, 0, info[0, dv.I_BOUNCE_ADDR] + word * 4,
                              info[0, dv.I_BOUNCE_LKEY], n, raddr, rkey, signaled,
                              q[dv.Q_STATE][0, dv.S_BOUNCE_RES])
        elif path == NIC_PULL:
            dv.wqe_rdma_write(q, 0, address_of(src, src_word), lkey, n, raddr, rkey, signaled, 0)
        else:
            _inline_segments(q, n, raddr, rkey, signaled)
        _finish(h, signaled, ring_now, with_sig, sig_raddr, sig_rkey, sig_value)
    return st


@cuda.jit(device=True)
def _fail(h, code):
    """Makes ``code`` the handle's status unless it has one; returns the status."""
    Q, q, a, cfg, scope, timeout_ns, chunk_bytes, ring_each_bytes = h
    leader = _rank(scope)[0] == 0
    st = OK
    if leader:
        if a[A_STATUS] == OK:
            a[A_STATUS] = code
        st = a[A_STATUS]
    st, w = _broadcast(a, scope, leader, st, 0)
    _sync(scope)
    return st


@cuda.jit(device=True)
def _put(h, src, src_word, nbytes, raddr, rkey, lkey, path, with_sig, sig_raddr, sig_rkey,
         sig_value):
    Q, q, a, cfg, scope, timeout_ns, chunk_bytes, ring_each_bytes = h
    _require_words(src)
    if nbytes < 0:
        return _fail(h, E_BAD_SIZE)
    if path == AUTO:
        path = path_for(cfg, nbytes)
    if path == NIC_PULL and nbytes > MAX_WQE_BYTES:
        # nic_pull posts a message as one WQE, whose byte count is 32 bits: 4 GiB + 4
        # bytes went as 4, and said OK.
        return _fail(h, dv.E_TOO_LARGE)
    if src_word < 0 or src_word * 4 + nbytes > src.shape[0] * 4:
        # Every path reads the payload from src's words (nic_pull's NIC through lkey): a
        # copy would send other memory's bytes as the payload.
        return _fail(h, E_BAD_SOURCE)
    # One copy of the post per path, each with its path a constant: a path known only at
    # run time (an argument, or AUTO's choice) then costs this one branch, where every
    # step of one shared copy tested it (64-byte put + quiet took 1.03 to 1.13x the time
    # with the path a constant; with the copies, a median of 4.77 us against the
    # constant's 4.80 to 4.86 on one H100, BENCHMARKS.md session 21). The branches are
    # written out: each must pass its path as a literal for its inlined copy to fold.
    # A constant path keeps one copy.
    if path == GPU_PUSH:
        return _put_by(h, src, src_word, nbytes, raddr, rkey, lkey, GPU_PUSH, with_sig, sig_raddr,
                       sig_rkey, sig_value)
    if path == GPU_PUSH_INLINE:
        return _put_by(h, src, src_word, nbytes, raddr, rkey, lkey, GPU_PUSH_INLINE, with_sig,
                       sig_raddr, sig_rkey, sig_value)
    if path == NIC_PULL:
        return _put_by(h, src, src_word, nbytes, raddr, rkey, lkey, NIC_PULL, with_sig, sig_raddr,
                       sig_rkey, sig_value)
    if path == HOST_STAGED:
        return _put_by(h, src, src_word, nbytes, raddr, rkey, lkey, HOST_STAGED, with_sig,
                       sig_raddr, sig_rkey, sig_value)
    return _fail(h, E_BAD_PATH)


@cuda.jit(device=True, inline=True)
def _put_by(h, src, src_word, nbytes, raddr, rkey, lkey, path, with_sig, sig_raddr, sig_rkey,
            sig_value):
    """``_put`` by one path (inlined at each call: there ``path`` is a constant)."""
    Q, q, a, cfg, scope, timeout_ns, chunk_bytes, ring_each_bytes = h
    if path != NIC_PULL and nbytes > 0 and \
            dv.push_small_ok(src, src_word, nbytes):
        # A small push, host_staged write or inline write is one WQE the leader posts
        # whole (dv.post_small, dv.staged_small): its own copy of _post, outside the chunk
        # loop. With ``small`` known only at run time inside the loop, a 64-byte put spent
        # 1.09 to 1.15 us before its doorbell against the verbs' 0.53 to 0.54 (0.22 us the
        # loop, 0.22 the run-time ``small``); this way 0.64 (H100, BENCHMARKS.md, session 24).
        return _post(h, path, True, src, src_word, nbytes, raddr, rkey, lkey, True, with_sig,
                     sig_raddr, sig_rkey, sig_value)
    chunk = nbytes
    if path == GPU_PUSH or path == HOST_STAGED:
        chunk = chunk_bytes
    # Chunk by chunk until the last (a put of 0 bytes posts one, empty: a signal alone),
    # counted by offset: no 64-bit division for the count.
    off = 0
    while True:
        n = min(chunk, nbytes - off)
        last = off + n >= nbytes
        st = _post(h, path, False, src, src_word + (off >> 2), n, raddr + off, rkey, lkey, last,
                   with_sig and last, sig_raddr, sig_rkey, sig_value)
        if st != OK or last:
            return st
        off += n


@cuda.jit(device=True)
def put(h, src, src_word, nbytes, raddr, rkey, lkey, path):
    """Sends ``nbytes`` from word ``src_word`` of ``src`` (a uint32 array in GPU memory)
    to ``raddr`` (key ``rkey``) on the handle's QP, by ``path`` (GPU_PUSH ..
    HOST_STAGED, or AUTO); non-blocking. ``lkey`` is the key of ``src``'s registration
    (nic_pull's NIC reads it there). The payload's words must lie in ``src``
    (``E_BAD_SOURCE`` if not). Returns OK or an error code, on every thread."""
    return _put(h, src, src_word, nbytes, raddr, rkey, lkey, path, False, 0, 0, 0)


@cuda.jit(device=True)
def put_signal(h, src, src_word, nbytes, raddr, rkey, lkey, path, sig_raddr, sig_rkey,
               sig_value):
    """``put``, then an 8-byte write of ``sig_value`` to ``sig_raddr`` (key ``sig_rkey``)
    that lands only after the data; announced at once. ``nbytes`` may be 0 (a signal
    alone)."""
    return _put(h, src, src_word, nbytes, raddr, rkey, lkey, path, True, sig_raddr, sig_rkey,
                sig_value)


# ======================================================================================
# Host side
# ======================================================================================
# Message sizes the model is asked about: powers of two from 4 B to 16 MiB, and the
# largest inline payload; between two sizes whose winners differ the crossover is
# found by bisection, to within 1/CROSSOVER_RESOLUTION of its size (the model's cost
# grows with the size: it counts every TLP).
_GRID_BYTES = tuple(1 << k for k in range(2, 25))
CROSSOVER_RESOLUTION = 64
_DEFAULT_TOPOLOGY = "same_switch"


@dataclass(frozen=True)
class Thresholds:
    """Which path ``AUTO`` takes by message size: ``rules`` are (max_bytes, path) pairs,
    smallest first; a message takes the first rule whose max_bytes it does not exceed,
    and the last rule takes every larger one. ``source`` says where they came from."""

    rules: tuple[tuple[int, str], ...]
    source: str = "given"

    def __post_init__(self):
        if not 1 <= len(self.rules) <= MAX_RULES:
            raise ValueError(f"rules: 1 to {MAX_RULES} (max_bytes, path) pairs, got "
                             f"{len(self.rules)}")
        last = 0
        for max_bytes, path in self.rules:
            # An int of the int64 cfg (NaN, inf, 100.5, "100" or True are none).
            if not _is_int(max_bytes) or not 0 < max_bytes <= MAX_RULE_BYTES:
                raise ValueError(f"rule max_bytes {max_bytes!r}: allowed an integer from 1 to "
                                 f"{MAX_RULE_BYTES} (2^62)")
            if path not in PATH_IDS or path == "auto":
                raise ValueError(f"rule path {path!r}: allowed "
                                 f"{', '.join(p for p in PATH_IDS if p != 'auto')}")
            if int(max_bytes) <= last:
                raise ValueError(f"rule max_bytes {max_bytes}: rules must grow, each above "
                                 f"the one before ({last})")
            if path == "gpu_push_inline" and max_bytes > _MAX_INLINE and \
                    (max_bytes, path) != self.rules[-1]:
                raise ValueError(f"gpu_push_inline up to {max_bytes} bytes: an inline WQE "
                                 f"holds at most {_MAX_INLINE}")
            last = int(max_bytes)
        if self.rules[-1][1] == "gpu_push_inline":
            raise ValueError("the last rule takes every larger message; gpu_push_inline "
                             f"holds at most {_MAX_INLINE} bytes")

    def path_for(self, nbytes: int) -> str:
        """The host's answer to what ``api.path_for`` answers in a kernel."""
        for max_bytes, path in self.rules:
            if nbytes <= max_bytes:
                return path
        return self.rules[-1][1]

    def to_cfg(self, cfg: np.ndarray) -> None:
        cfg[C_NRULES] = len(self.rules)
        for r, (max_bytes, path) in enumerate(self.rules):
            cfg[C_RULES + 2 * r] = max_bytes
            cfg[C_RULES + 2 * r + 1] = PATH_IDS[path]

    @classmethod
    def fixed(cls, path: str) -> "Thresholds":
        """Every message on one path."""
        return cls(((1 << 62, path),), source=f"fixed: {path}")

    @classmethod
    def from_model(cls, *args, **kwargs) -> "Thresholds":
        """``_from_model`` (below), computed once per process for each set of arguments."""
        key = (args, tuple(sorted(kwargs.items())))
        if key not in _MODEL_CACHE:
            _MODEL_CACHE[key] = cls._from_model(*args, **kwargs)
        return _MODEL_CACHE[key]

    @classmethod
    def _from_model(cls, calibration: str | None = "newest", topology: str = _DEFAULT_TOPOLOGY,
                   paths: tuple[str, ...] = ("gpu_push", "gpu_push_inline", "nic_pull",
                                             "host_staged")) -> "Thresholds":
        """The fastest path per size by the model's zero-load latency
        (``gpuwrite.model.rank_paths``) on ``topology``, with this machine's calibration
        file applied where one exists (``"newest"``: the newest file in
        experiments/calibration/ measured on this GPU, the model's defaults where there is
        none, and on the simulator the newest of any GPU; None: the model's defaults). The
        crossovers are the model's, on real hardware; emulated mode's costs differ (its
        staging region is host memory), so measure before trusting them there."""
        from gpuwrite.model import Params, preset, rank_paths

        params = Params()
        used = "model defaults"
        whose = ""
        if calibration == "newest":
            device = _this_gpu()
            calibration = newest_calibration(device=device)
            if device is not None and calibration is None:
                used = f"model defaults (no calibration of the {device} stored)"
            elif device is None:
                whose = " (another machine's: the simulator has no GPU of its own)"
        if calibration:
            params = params.with_calibration(calibration)
            used = f"calibration {os.path.basename(calibration)}{whose}"

        topo = preset(topology)
        known: dict[int, str] = {}

        def best(size: int) -> str:
            if size in known:
                return known[size]
            for entry in rank_paths(topo, size, params):
                if entry["path"] in paths and (entry["path"] != "gpu_push_inline" or
                                               size <= _MAX_INLINE):
                    known[size] = entry["path"]
                    return entry["path"]
            raise ValueError(f"paths={paths}: none can carry {size} bytes")

        sizes = sorted(set(_GRID_BYTES) | {_MAX_INLINE, _MAX_INLINE + 1})
        winners = [best(size) for size in sizes]
        rules: list[tuple[int, str]] = []
        for k in range(len(sizes) - 1):
            lo, won, hi = sizes[k], winners[k], sizes[k + 1]
            while won != winners[k + 1]:
                # The largest size in [lo, hi) that ``won`` still wins: the crossover.
                a, b = lo, hi
                while b - a > max(1, a // CROSSOVER_RESOLUTION):
                    mid = (a + b) // 2
                    if best(mid) == won:
                        a = mid
                    else:
                        b = mid
                rules.append((a, won))
                lo, won = b, best(b)
        rules.append((1 << 62, winners[-1]))
        merged: list[tuple[int, str]] = []
        for rule in rules:
            if merged and merged[-1][1] == rule[1]:
                merged[-1] = (rule[0], rule[1])
            else:
                merged.append(rule)
        return cls(tuple(merged[-MAX_RULES:]),
                   source=f"model rank_paths on {topology}, {used}")


_MODEL_CACHE: dict = {}

# Where the model cannot be imported (its table libraries missing): the crossovers it
# computes for the reference H200 (experiments/calibration/nvidia-h200-2026-11-21.toml,
# same_switch): inline up to 220 B, gpu_push above (with per-packet link credits and
# cut-through at the NIC, nic_pull no longer overtakes gpu_push at large sizes there).
FALLBACK_RULES = ((220, "gpu_push_inline"), (1 << 62, "gpu_push"))


def default_thresholds() -> Thresholds:
    """``Thresholds.from_model()``, or ``FALLBACK_RULES`` where the model is not
    importable (the source says which)."""
    try:
        return Thresholds.from_model()
    except ImportError as exc:
        return Thresholds(FALLBACK_RULES, source=f"fallback FALLBACK_RULES (the model did "
                                                 f"not import: {exc})")


def newest_calibration(folder: str | None = None, device: str | None = None) -> str | None:
    """The newest ``gpuwrite calibrate`` file in ``folder`` (default: the checkout's
    experiments/calibration/, ``calibfiles.calibration_dir``) that was
    measured on a GPU; with ``device``, on a GPU of that name (``[device] name``), None if
    there is none: one GPU's crossovers are not another's."""
    import tomllib

    if folder is None:
        folder = calibration_dir()
    for file in newest_first(folder):
        head = tomllib.loads(file.read_text()).get("device", {})
        if head.get("simulator", False):    # the simulator's timings are Python's
            continue
        if device is None or head.get("name") == device:
            return str(file)
    return None


def _this_gpu() -> str | None:
    """The current GPU's name as calibration files record it (``device_name``), None on
    the simulator."""
    if SIMULATOR:
        return None
    from gpuwrite.experiments.backends import device_name

    return device_name()


class TestbedNotReady(RuntimeError):
    """Testbed mode cannot run this session here; ``reason`` says why, in one line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


WORLDS = ("emulated", "testbed")
MAX_TIMEOUT_S = 9e9    # cfg[C_TIMEOUT_NS] keeps the timeout as int64 nanoseconds (< 9.22e18)


def _is_int(value) -> bool:
    """A whole number as Python or numpy keeps one (not a bool, a float or a string)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _source_words(words) -> np.ndarray:
    """``words`` as the contiguous uint32 array ``Session.source`` registers; a ValueError
    naming what is wrong where a cast would change them (floats truncated, negative or
    wider values wrapped) or the kernel could not index them as words (not 1-D)."""
    array = np.asarray(words)
    if array.dtype.kind not in "ui" or array.ndim != 1:
        raise ValueError(f"words: allowed a 1-D array of integers (uint32 words), got dtype "
                         f"{array.dtype} and shape {array.shape}")
    if array.dtype != np.uint32 and array.size and \
            (int(array.min()) < 0 or int(array.max()) > 0xFFFFFFFF):
        raise ValueError(f"words: values {int(array.min())} to {int(array.max())}; allowed 0 to "
                         "2^32 - 1 (uint32 words)")
    return np.ascontiguousarray(array, dtype=np.uint32)


class Session:
    """What kernels that use put/quiet need, from one NIC context: ``Q`` (the QPs),
    ``cfg`` (timeout, chunking, the auto thresholds), and registered buffers.

    ``n_qps`` QPs, each with its own CQ, staging ring and bounce ring (see
    :class:`gpuwrite.host.QueueSet`). Large gpu_push and host_staged messages go as WQEs
    of ``chunk_bytes``; staging and bounce rings hold four of them by default.

    ``world="testbed"``: the same ``Q``, ``cfg`` and calls on one local mlx5 NIC, every QP
    connected to itself (:mod:`gpuwrite.backends.testbed.session`; ``testbed`` takes its
    options: device, port, gid_index, ring_memory, qp_timeout, retry_cnt). Sources are
    registered so that the MR's addresses are the GPU's (dma-buf with iova = the GPU
    address, else nvidia_peermem), so nic_pull's WQE carries what ``put`` computes.
    Where this machine cannot run it, :class:`TestbedNotReady` says why in one line; a
    bring-up step that fails on the NIC raises ``TestbedError`` naming the step.
    ``describe()`` says what stands in for what.

    nic_pull's reads of GPU memory are answered by ``pull_agent``:

    * ``"copy_engine"`` (the default): the engine's thread calls the CUDA driver for each
      pull, about 9 us of host-side cost whatever the size, more than the read it stands
      for. Wait for a kernel that puts (``cuda.synchronize()``, or its stream's) before
      copying anything to the host: a synchronous copy into pageable memory issued while
      the kernel runs holds the driver until the kernel ends, the pulls the kernel waits
      for cannot start, and its waits end in ``E_TIMEOUT_CQE`` (seen on an H100,
      BENCHMARKS.md, session 7).
    * ``"gpu"``: the GPU pull agent (:mod:`gpuwrite.paths.pull_agent`), persistent blocks
      on a stream of their own, running for a ``with session.agent_running():`` block; a
      pull then crosses PCIe as a NIC's read does. A real GPU only; see
      ``agent_running`` for what must not happen inside the block.
    """

    __test__ = False

    def __init__(self, n_qps: int, *, thresholds: Thresholds | None = None,
                 world: str = "emulated", policy: str = "hold", link=None, workers: int = 1,
                 timeout_s: float = 5.0, chunk_bytes: int = 65536,
                 ring_each_bytes: int = 65536, sq_bbs: int = 256,
                 stage_slots: int | None = None, stage_slot_bytes: int = 256,
                 bounce_bytes: int | None = None, stage_credits: str | None = None,
                 poll_delay_ns: int | None = None, context=None, testbed: dict | None = None,
                 pull_agent: str = "copy_engine"):
        from gpuwrite.host.verbs import DEFAULT_POLL_DELAY_NS, DEFAULT_STAGE_CREDITS, Context
        from gpuwrite.paths.pull_agent import PULL_AGENTS

        # What close() releases, set before anything can fail.
        self._closed = False
        self._testbed = self._context = self._pd = self._queues = None
        self._own_ctx = False
        self._keep: list = []
        if world not in WORLDS:
            raise ValueError(f"world={world!r}: allowed {', '.join(WORLDS)}")
        if pull_agent not in PULL_AGENTS:
            raise ValueError(f"pull_agent={pull_agent!r}: allowed {', '.join(PULL_AGENTS)}")
        if pull_agent == "gpu" and SIMULATOR:
            raise ValueError("pull_agent='gpu': the CUDA simulator runs one kernel at a time, so "
                             "the agent cannot run beside a kernel that puts; allowed here: "
                             "'copy_engine'")
        self.pull_agent = pull_agent
        self._agent = None
        self._agent_pulls = None
        if world == "testbed":
            emulated_only = [f"{name}={value!r}" for name, value, default in (
                ("policy", policy, "hold"), ("link", link, None), ("workers", workers, 1),
                ("poll_delay_ns", poll_delay_ns, None), ("context", context, None),
                ("pull_agent", pull_agent, "copy_engine")) if value != default]
            if emulated_only:
                raise ValueError(f"{', '.join(emulated_only)}: options of the emulated NIC; "
                                 "world='testbed' runs on a real one")
        elif testbed is not None:
            raise ValueError(f"testbed={testbed!r}: options of world='testbed' (world is {world!r})")
        if not (isinstance(timeout_s, (int, float, np.integer, np.floating)) and
                not isinstance(timeout_s, bool) and 1e-9 <= timeout_s <= MAX_TIMEOUT_S):
            raise ValueError(f"timeout_s={timeout_s!r}: must be > 0; allowed 1e-9 (1 ns) to "
                             f"{MAX_TIMEOUT_S:.3g} s (cfg keeps it as int64 nanoseconds)")
        # Whole numbers, not floats: cfg keeps them as int64 (1.5 became 1 without a word) and
        # the rings sized from chunk_bytes were refused under another setting's name.
        if not _is_int(chunk_bytes) or chunk_bytes % 4 or not 64 <= chunk_bytes <= MAX_WQE_BYTES:
            raise ValueError(f"chunk_bytes={chunk_bytes!r}: a whole multiple of 4 (chunks start "
                             f"on a source word), 64 to {MAX_WQE_BYTES} (one WQE)")
        if not _is_int(ring_each_bytes) or ring_each_bytes < 0:
            raise ValueError(f"ring_each_bytes={ring_each_bytes!r}: a whole number >= 0")
        if not _is_int(sq_bbs) or sq_bbs < 64:
            raise ValueError(f"sq_bbs={sq_bbs!r}: a whole number, at least 64 (a completion is "
                             "asked for every quarter of the SQ, and an inline WQE takes up to "
                             "8 BBs)")
        if stage_slots is None:
            # A stage_slot_bytes of 0 or less is the queues' to refuse, by name (here it
            # was a division by zero).
            stage_slots = max(64, 4 * L.stage_slots_needed(chunk_bytes, stage_slot_bytes)) \
                if _is_int(stage_slot_bytes) and stage_slot_bytes > 0 else 64
        if bounce_bytes is None:     # not 0: the queues refuse it, by name
            bounce_bytes = max(4 * chunk_bytes, 65536)
        self.world = world
        if world == "testbed":
            # A real NIC returns staging credits only as completions: stage_credits is moot.
            from gpuwrite.backends.testbed.session import open_session

            self._testbed = open_session(n_qps, sq_bbs=sq_bbs, ncqe=max(sq_bbs, 256),
                                         stage_slots=stage_slots,
                                         stage_slot_bytes=stage_slot_bytes,
                                         bounce_bytes=bounce_bytes, options=testbed)
            self._queues = self._testbed.queues
        try:
            self.thresholds = thresholds or default_thresholds()
            self.chunk_bytes = chunk_bytes
            if world == "emulated":
                self._own_ctx = context is None
                self._context = context or Context(policy=policy, link=link, workers=workers)
                self._pd = self._context.alloc_pd()
                self._queues = self._pd.create_queues(
                    n_qps, sq_bbs=sq_bbs, ncqe=max(sq_bbs, 256), stage_slots=stage_slots,
                    stage_slot_bytes=stage_slot_bytes, bounce_bytes=bounce_bytes,
                    stage_credits=DEFAULT_STAGE_CREDITS if stage_credits is None else stage_credits,
                    poll_delay_ns=DEFAULT_POLL_DELAY_NS if poll_delay_ns is None else poll_delay_ns)
            cfg = np.zeros(C_COLS, dtype=np.int64)
            cfg[C_TIMEOUT_NS] = int(timeout_s * 1e9)
            cfg[C_CHUNK_BYTES] = chunk_bytes
            cfg[C_RING_EACH_BYTES] = ring_each_bytes
            self.thresholds.to_cfg(cfg)
            self.cfg_host = cfg
            self.cfg = cuda.to_device(cfg)
            self.timeout_s = timeout_s
        except BaseException:
            self.close()     # a testbed session's NIC objects too
            raise

    def _check_open(self) -> None:
        if self._closed:
            from gpuwrite.host.verbs import VerbsError

            raise VerbsError("the session is closed: its queues, regions and buffers are "
                             "released (open a new Session)")

    @property
    def context(self):
        """The emulated NIC's context (None in testbed mode)."""
        self._check_open()
        return self._context

    @property
    def pd(self):
        """The session's protection domain (None in testbed mode)."""
        self._check_open()
        return self._pd

    @property
    def queues(self):
        """The session's QueueSet."""
        self._check_open()
        return self._queues

    @property
    def Q(self) -> tuple:
        """The queues' tuple kernels pass to ``open_*``."""
        return self.queues.device_args

    def source(self, words: np.ndarray):
        """A copy of ``words`` (uint32) in GPU memory, registered for the NIC to read;
        returns (device array, memory region): pass ``region.lkey`` as put's ``lkey``.
        ``words``: a 1-D host array (or sequence) of integers from 0 to 2^32 - 1."""
        self._check_open()
        words = _source_words(words)
        if self._testbed is not None:
            return self._testbed.source(words)
        dev = cuda.to_device(words)
        mr = self.pd.reg_mr(dev, access=L.ACCESS_LOCAL_WRITE)
        self._keep.append(dev)
        return dev, mr

    def receive(self, nwords: int, fill: int = 0):
        """A remote-writable region of ``nwords`` uint32 in GPU-visible host memory (the
        receiver's buffer; a kernel can poll it); returns (Mapped, memory region).
        ``nwords``: an integer of at least 1; ``fill``: an integer word, 0 to 2^32 - 1."""
        self._check_open()
        if not _is_int(nwords) or nwords < 1:
            raise ValueError(f"nwords={nwords!r}: allowed an integer of at least 1")
        if not _is_int(fill) or not 0 <= fill <= 0xFFFFFFFF:
            raise ValueError(f"fill={fill!r}: allowed an integer from 0 to 2^32 - 1 (a uint32 word)")
        if self._testbed is not None:
            return self._testbed.receive(nwords, fill)
        from gpuwrite.host.memory import mapped

        buf = mapped((int(nwords),), np.uint32)
        buf.host[:] = np.uint32(fill)
        mr = self.pd.reg_mr(buf, access=L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE)
        self._keep.append(buf)
        return buf, mr

    def start(self) -> "Session":
        """Starts the emulated NIC's threads (a real NIC runs already)."""
        self._check_open()
        if self._testbed is None and not self.context.running:
            self.context.start()
        return self

    @contextlib.contextmanager
    def agent_running(self):
        """Where ``pull_agent="gpu"``: the GPU pull agent runs for the ``with`` block (launch
        your kernels and wait for their streams inside it); elsewhere it does nothing.

        Inside the block a persistent kernel runs, so nothing may wait for the whole device:
        not ``cuda.synchronize()``, not a module's first load (load kernels before, with
        ``gpuwrite.cudaenv.preload``), not a free of device memory (Numba's are deferred
        here, ``cuda.defer_cleanup``). A kernel loaded late waits for the agent to leave
        after ``2 * timeout_s`` idle, and its pulls then fail (reason ``pull_failed``)."""
        self._check_open()
        if self.pull_agent != "gpu" or self._agent is not None:
            yield self
            return
        from gpuwrite.paths.pull_agent import PullAgent

        self.start()
        # A pull the agent leaves unanswered fails (reason pull_failed) before a kernel's
        # own wait gives up, so the kernel sees the reason. The agent holds Numba's frees
        # while it runs (PullAgent's with block).
        self._agent = PullAgent(self.context, pull_timeout_s=min(1.0, self.timeout_s / 2),
                                idle_timeout_s=max(10.0, 2 * self.timeout_s))
        try:
            with self._agent:
                yield self
        finally:
            agent, self._agent = self._agent, None
            self._agent_pulls = agent.report

    def describe(self) -> str:
        """What stands in for what, in one line."""
        self._check_open()
        if self._testbed is not None:
            return self._testbed.describe()
        pull = ("pulled by the GPU agent (persistent blocks answer the engine's reads)"
                if self.pull_agent == "gpu" else "pulled by the copy engine (a driver call per pull)")
        n = self.context.workers
        return (f"emulated: a software NIC ({n} C thread{'s' if n > 1 else ''}) stands in for "
                f"the NIC; gpu_push stages in host memory; nic_pull is {pull}")

    def agent_report(self) -> dict | None:
        """What the GPU pull agent did in the last ``agent_running`` block (its pulls and
        bytes, and the engine's answered and failed pulls); None before one."""
        self._check_open()
        return self._agent_pulls

    def qp_errors(self, status) -> dict:
        """Named errors of the QPs whose status (as a kernel stored it, indexed by QP)
        is not OK, with the syndrome of the last error completion where there was one."""
        self._check_open()
        state = self.queues.gpu_state()
        codes = np.asarray(status).ravel()
        if codes.size > state.shape[0]:
            raise ValueError(f"status: {codes.size} entries; allowed at most one per QP "
                             f"({state.shape[0]}), indexed by QP")
        out = {}
        for i, code in enumerate(codes):
            if int(code) == OK:
                continue
            synd = int(state[i, dv.S_LAST_SYND])
            # The low byte is the vendor syndrome: gpuwrite's reason on the emulated NIC,
            # the hardware's own code on a real one.
            vendor = (L.reason_name(synd & 0xFF) if self._testbed is None
                      else f"vendor syndrome 0x{synd & 0xFF:02x}")
            out[int(i)] = {"status": error_name(code),
                           "syndrome": L.syndrome_name(synd >> 8) if synd else "",
                           "reason": vendor if synd else ""}
        return out

    def close(self) -> None:
        """Deregisters the session's regions (no byte lands there again) and closes the
        context if the session opened it, else destroys the session's queues on it (the
        engine stops polling them, their QP numbers are free again); testbed: releases
        everything last-made-first. Closing twice does nothing; any other use of a closed
        session raises VerbsError."""
        if self._closed:
            return
        self._closed = True
        testbed, self._testbed = self._testbed, None
        context, pd, queues = self._context, self._pd, self._queues
        self._context = self._pd = self._queues = None
        self._keep = []
        if testbed is not None:
            testbed.close()
            return
        # Last pushed runs first, each even where one before it raised.
        with contextlib.ExitStack() as release:
            if context is not None and self._own_ctx:
                release.callback(context.close)
                release.callback(context.stop)
            if pd is not None:
                release.callback(pd.close)
            if queues is not None and not self._own_ctx:
                release.callback(queues.close)

    def __enter__(self) -> "Session":
        self._check_open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
