"""Device verbs: what a kernel calls to push data through the NIC.

A queue pair is driven by one thread block at a time. Bookkeeping verbs run on one
thread (thread 0 by convention); the payload copies are cooperative over the block, with
``cuda.syncthreads()`` between the copy and the doorbell, except that ``push_small``
posts a small payload from one thread alone. Every step that is visible on the bus is
one function here:

* ``stage_reserve``   wait for staging-slot credits from the NIC, claim slots
* ``stage_header``    write the staging-slot header in front of a pushed payload
* ``copy_bytes``      cooperative copy of a payload (GPU memory -> staging/bounce/WQE),
  16-byte vectors (``gpuwrite.device.copy``); ``copy_words`` is its word-count form
* ``push_reserve``    the bookkeeping of a pushed write: SQ and staging space, header, WQE
* ``push_small``      all of a pushed write of at most SMALL_PUSH_BYTES, on one thread
* ``push_mid``        the same for whole aligned 16-byte words up to MID_PUSH_BYTES
* ``inline_small``    all of an inline write of at most SMALL_PUSH_BYTES, on one thread
* ``wqe_rdma_write``  build an RDMA-write WQE (data segment) at the producer index
* ``wqe_rdma_write_inline``  the same with the payload inside the WQE
* ``ring_doorbell``   publish the doorbell record, then write the doorbell register
  (``flush_doorbell`` rings only if WQEs are pending; every wait does so first)
* ``poll_cq`` / ``wait_done``  consume completions, wait for a WQE to complete
* ``cq_publish``      hand consumed completions back to the NIC (the CQ doorbell record)

``Q`` is the tuple of arrays a :class:`gpuwrite.host.QueueSet` hands to kernels (see
``QueueSet.device_args``); ``i`` is the QP's row in it. Waits take a timeout in
nanoseconds and return a negative error code naming what they waited for.
"""
from __future__ import annotations

from numba import uint32

from gpuwrite import layouts as L
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device.copy import copy_bytes, load16_if, load_words_if, store16_if
from gpuwrite.device.intrinsics import (
    backoff,
    cp_async16,
    cp_async_wait_all,
    fence_sys,
    globaltimer_ns,
    ld_acquire_sys_u32,
    st_relaxed_sys_u32,
    st_relaxed_sys_u64,
    st_release_sys_u32,
    st_v4_u32,
    address_of,
    bswap32,
    ld_v4_u32,
)

# Error codes returned by device verbs (0 is success).
OK = 0
E_TIMEOUT_STAGING = -1     # waited for staging-slot credits from the NIC
E_TIMEOUT_SQ = -2          # waited for send-queue space (completions)
E_TIMEOUT_CQE = -3         # waited for a completion
E_QP_ERROR = -4            # the NIC moved the QP to the error state
E_TOO_LARGE = -5           # the message does not fit the staging ring or an inline WQE
E_CQE_ERROR = -6           # a completion came back with an error syndrome
E_TIMEOUT_BOUNCE = -7      # waited for host bounce-buffer space (completions)
E_NOT_ALONE = -8           # a one-thread sending kernel was given a message it cannot post alone

ERROR_NAMES = {
    OK: "ok",
    E_TIMEOUT_STAGING: "timed out waiting for staging credits from the NIC",
    E_TIMEOUT_SQ: "timed out waiting for send-queue space",
    E_TIMEOUT_CQE: "timed out waiting for a completion",
    E_QP_ERROR: "the queue pair is in the error state",
    E_TOO_LARGE: "message too large for the staging ring or an inline WQE",
    E_CQE_ERROR: "a completion carried an error syndrome",
    E_TIMEOUT_BOUNCE: "timed out waiting for bounce-buffer space",
    E_NOT_ALONE: "a message thread 0 cannot post alone, given to the kernel made for one-thread "
                 "messages",
}

# Positions in the tuple Q (QueueSet.device_args).
Q_SQ, Q_DBREC, Q_UAR, Q_STATUS, Q_CQ, Q_CQDB, Q_STAGE, Q_STATE, Q_INFO, Q_WQE_AUX, Q_BOUNCE = \
    range(11)

# Columns of the GPU-side QP state (int64, device memory, owned by the posting block).
S_PI = 0            # BBs written (producer index, monotonic)
S_DONE = 1          # BBs completed, learned from CQEs
S_CQ_CI = 2         # CQEs consumed
S_STAGE_RES = 3     # staging slots claimed
S_STAGE_FREED = 4   # staging slots returned by the NIC, last value seen
S_PUSH_SEQ = 5      # pushed messages
S_BOUNCE_RES = 6    # host bounce-buffer words claimed (host_staged)
S_BOUNCE_FREE = 7   # bounce words free again (from completions)
S_LAST_SYND = 8     # syndrome << 8 | reason of the last error completion
S_LAST_CQE = 9      # wqe_counter of the last completion
S_DB_WORD = 10      # first 8 bytes of the last WQE's control segment (doorbell value)
S_DB_PI = 11        # producer index at the last doorbell
S_STAGE_POS = 12    # where the next staging run starts, in slots (S_STAGE_RES mod slots)
S_STAGE_SIG = 13    # S_STAGE_RES when the last signaled pushed WQE was posted (I_STAGE_CQE)
S_LAST_PI = 14      # producer index of the last WQE written
S_LAST_AUX = 15     # its bookkeeping word (as kept in Q_WQE_AUX), for poll_cq's common case
S_CQ_PUB = 16       # CQEs handed back to the NIC: the consumer index last written (cq_publish)
S_POLL_ADJ = 17     # ns added to I_POLL_DELAY_NS before a wait's first poll (I_POLL_ADAPT)
S_BOUNCE_POS = 18   # where the next bounce run starts, in words (S_BOUNCE_RES mod the ring)
S_COLS = 19

# Columns of the read-only QP description (int64).
I_QPN, I_SQ_BBS, I_NCQE, I_LOG_NCQE, I_SLOTS, I_SLOT_BYTES, I_STAGE_ADDR, I_STAGE_LKEY, \
    I_BOUNCE_ADDR, I_BOUNCE_LKEY, I_BOUNCE_WORDS, I_SLOT_SHIFT, I_DB_MMIO, I_STAGE_CQE, \
    I_POLL_DELAY_NS, I_POLL_ADAPT = range(16)
I_COLS = 16
# I_POLL_DELAY_NS: how long a wait for every WQE written lets pass before its first poll (a
# QueueSet's poll_delay_ns, default gpuwrite.host.verbs.DEFAULT_POLL_DELAY_NS: 300 ns).
# A host read issued right after the doorbell can reach host memory before the NIC has
# answered and cost a whole PCIe round trip for nothing: a 64-byte gpu_push took 4.4 to
# 4.9 us polling at once and 3.4 to 3.7 with 300 ns, on H100 and H200 hosts alike (the
# constant's comment). The best value depends on the machine and the kernel: measure it
# (``gpuwrite bench`` reports the sweep of pauses; BENCHMARKS.md, sessions 3 and 23).
# I_POLL_ADAPT: nonzero where that pause follows the completions (``next_poll_adj``): it
# starts at I_POLL_DELAY_NS, and after each wait for every WQE written it shrinks by
# _PAUSE_DOWN_NS if the first poll found what the wait needed and grows by _PAUSE_UP_NS if
# it did not. A completion lands later the larger the message (the NIC's copy), and a first
# read sent before it lands costs a whole read more: with 300 ns, a 4 KiB gpu_push took
# 5.22 to 5.28 us on an H100 host, with 900 ns 4.38, and 64 B to 1 KiB were fastest at
# 300 (BENCHMARKS.md, session 27). The pause so settles just past where the completion
# lands, whatever the size, host and NIC, and the first poll misses about one wait in five.
# I_STAGE_CQE: nonzero where staging credits come back with completions rather than in
# the NIC status line (a real NIC has no such line): pushed WQEs carry their staging
# cursor as ``aux`` (``stage_aux``), enough of them are signaled (``stage_signal``), and
# ``stage_reserve`` waits on the CQ.

# A WQE's ``aux`` (kept per WQE, handed back by its completion): the cursor its completion
# frees, of the host bounce ring, or of the staging ring when AUX_STAGE is set.
AUX_STAGE = 1 << 39
AUX_CURSOR = AUX_STAGE - 1

# Header-derived word offsets, bound as compile-time constants.
_W_OPC = L.CTRL_W_OPMOD_IDX_OPCODE
_W_QPN_DS = L.CTRL_W_QPN_DS
_W_FLAGS = L.CTRL_W_FLAGS
_FM_SHIFT = 8 * L.CTRL_FM_CE_SE_BYTE
_W_IMM = L.CTRL_W_IMM
_W_RADDR = L.RADDR_BASE // 4
_W_DATA = L.DATA_BASE // 4
_BB_WORDS = L.WQE_BB // 4
_DS = L.WQE_DS
_CQE_WORDS = L.CQE_SIZE // 4
_CQE_TAIL = L.CQE_W_TAIL
_CQE_SYND = L.CQE_W_SYNDROME
_CQDB_CI = L.CQ_DBREC_W_SET_CI
_DB_SEND = L.QP_DBREC_W_SEND
_ST_FREED = L.STATUS_W_STAGE_FREED
_ST_STATE = L.STATUS_W_QP_STATE
_HDR_WORDS = L.STAGE_HDR_BYTES // 4
_HDR_MAGIC = L.STAGE_W_MAGIC_SEQ
_HDR_BYTES = L.STAGE_W_BYTE_COUNT
_HDR_SLOTS = L.STAGE_W_SLOTS
_HDR_INDEX = L.STAGE_W_INDEX_FLAGS
_MAGIC = L.STAGE_MAGIC
_ALIGN = L.STAGE_ALIGN_BYTES
_ALIGN_MIN = L.STAGE_ALIGN_MIN_BYTES
_F_ALIGNED = L.STAGE_F_ALIGNED
_INLINE_FLAG = L.INLINE_SEG_FLAG
_MAX_INLINE = L.MAX_INLINE_BYTES

# Options for kernels that call these verbs: at most 128 registers a thread, so that a
# block of 512 threads can launch (65536 registers per SM). The payload preloads took the
# H100's compiler past 128 and launches failed with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
# ptxas for sm_90 fits send_messages in 128 with no spills. The simulator has no such option.
MAX_REGISTERS = 128
KERNEL_OPTIONS = {} if SIMULATOR else {"max_registers": MAX_REGISTERS}
_CQ_UPDATE = L.CTRL_CQ_UPDATE
_OP_WRITE = L.OPCODE_RDMA_WRITE
_OP_NOP = L.OPCODE_NOP
_CQE_INVALID = L.CQE_INVALID
_CQE_REQ_ERR = L.CQE_REQ_ERR
_QPS_ERR = L.QPS_ERR
_POLL_NS = 64
# How an adapting first-poll pause (I_POLL_ADAPT) moves: down after a wait whose first poll
# found its completion, up after one whose first poll did not, within 0 .. _PAUSE_MAX_NS.
# Down four times slower than up, so that four first polls in five find their completion:
# a miss costs a whole read (1.1 to 1.3 us on an H100 host), each step down saves 16 ns.
# Same-host A/B against the pause fixed at 300 ns (BENCHMARKS.md, session 27; 32 | 256
# threads, three rounds): 4 KiB 4.77 to 4.96 | 4.19 to 4.42 us against 5.73 to 5.89 | 5.31
# to 5.34, 16 KiB 7.14 to 7.52 | 5.18 to 5.28 against 7.23 to 8.32 | 5.44 to 6.43, 64 B to
# 1 KiB level or up to 0.2 us faster. 128 up (eight in nine) was 0.1 to 0.2 us slower at 256
# B and 1 KiB; 32 up (two in three) left 4 KiB a read later in some runs.
_PAUSE_UP_NS = 64
_PAUSE_DOWN_NS = 16
_PAUSE_MAX_NS = 8000
# A completion wait polls this many times back to back before it starts pausing. One poll
# is a PCIe read round trip (about 1.1 us), which already paces a single thread, and a
# 64 ns nanosleep sleeps 128 ns on an H200: pausing from the first empty poll added about
# 0.1 us to a 64-byte round trip (BENCHMARKS.md, session 4).
_EAGER_POLLS = 4
# Waits for ring space (staging slots, bounce ring) pause up to this long between polls.
# Each poll is a PCIe read of host memory that shares the link with the payload writes,
# and polling harder does not help: on an H200, 64-byte gpu_push from 256 QPs ran at 72 M
# msg/s with two host reads per credit poll, 97 M/s with one, and 51 M/s with one and no
# pause (BENCHMARKS.md, session 3). Space for a large message frees slowly anyway.
_SPACE_POLL_MAX_NS = 2048


# The vector stores below write whole segments and the staging header as 16-byte
# words in the order the header declares them; check that order once, here.
if (_W_OPC, _W_QPN_DS, _W_FLAGS, _W_IMM, _W_RADDR, _W_DATA) != (0, 1, 2, 3, 4, 8) or \
        (_HDR_MAGIC, _HDR_BYTES, _HDR_SLOTS, _HDR_INDEX, _HDR_WORDS) != (0, 1, 2, 3, 4):
    raise ImportError("gw_layouts.h changed the word order of the WQE control, remote-address "
                      "or data segment or of the staging header; the device verbs' 16-byte "
                      "stores (_ctrl, _raddr, wqe_rdma_write, stage_header) need updating")

# Payloads of at most this many bytes are pushed by one thread alone (``push_small``),
# whose four 16-byte loads are all issued before its bookkeeping.
SMALL_PUSH_BYTES = 64
# Whole aligned 16-byte words beyond SMALL_PUSH_BYTES, up to this many bytes, are pushed
# by one thread too (``push_mid``), and any payload up to MID_REG_VECTORS vectors (128
# bytes) from any word: every byte is read before the bookkeeping, the first 128 into
# registers (more would spill at 128 registers) and the rest by ``cp.async`` into
# shared memory (since session 35: 256 B 0.07 to 0.26 us faster in the median than
# reading them after it, 192 B 0.05 to 0.16). On an H100 one thread pushed 128 B in 3.62
# to 3.65 us where the first warp took 3.81 to 3.84, and 256 B 0.03 to 0.06 us faster
# (BENCHMARKS.md, session 26; with it in the kernel a 64-byte push is 0.03 to 0.04 us
# slower). Larger payloads go to a warp, whose lanes store theirs side by side
# (``gpuwrite.paths.kernels``); one thread was slower than the warp at 512 B (session 35).
MID_PUSH_BYTES = 256
if MID_PUSH_BYTES >= _ALIGN_MIN:
    raise ImportError("push_small and push_mid assume their payloads take no alignment lead")
# push_mid holds a payload's first 8 vectors (128 bytes) in registers (two ``_load64``)
# and reads the rest, at most MID_LATE_VECTORS, into a shared buffer of MID_BUF_WORDS.
MID_REG_VECTORS = 8
MID_REG_BYTES = 16 * MID_REG_VECTORS
MID_LATE_VECTORS = MID_PUSH_BYTES // 16 - MID_REG_VECTORS
MID_BUF_WORDS = 4 * MID_LATE_VECTORS


@cuda.jit(device=True)
def ring_pad(pos, ring, n):
    """Units skipped before a run of ``n`` that would start at ``pos`` in a ring of
    ``ring`` units: runs never wrap the end, so a run that does not fit starts at 0."""
    return ring - pos if pos + n > ring else 0


@cuda.jit(device=True)
def ring_free_target(res, pad, n, ring):
    """How far the consumer must have freed (cumulative units) before a run of ``n``
    after ``pad`` skipped units, claimed at cumulative position ``res``, is free.

    The run's units were last used one lap earlier, ``ring`` units back; but when the
    run wraps to the start, the skipped units are nobody's yet, so once everything
    claimed before ``res`` is free the ring is empty and any run that fits it fits:
    the target never exceeds ``res`` (pad + n can exceed the ring; without this cap
    such a run waited for units no one would ever free)."""
    return min(res + pad + n - ring, res)


# Shapes of a posting block's shared-memory copy of its QP's state and description
# (global tuples are compile-time constants, as cuda.shared.array needs).
QP_STATE_SHAPE = (1, S_COLS)
QP_INFO_SHAPE = (1, I_COLS)


@cuda.jit(device=True)
def qp_cached(Q, i, state_row, info_row):
    """QP ``i`` as a one-QP ``Q`` (use index 0) whose GPU-side state and description are
    ``state_row`` and ``info_row``, of shapes QP_STATE_SHAPE and QP_INFO_SHAPE.

    A posting block keeps them in shared memory (``qp_cache_load``, then
    ``qp_cache_store`` when it is done): the bookkeeping of every message then reads
    shared memory instead of making a chain of dependent global-memory loads (about 1 us
    of a 64-byte push on an H200, see ``gpuwrite bench``'s breakdown).
    """
    return (Q[Q_SQ][i:i + 1], Q[Q_DBREC][i:i + 1], Q[Q_UAR][i:i + 1], Q[Q_STATUS][i:i + 1],
            Q[Q_CQ][i:i + 1], Q[Q_CQDB][i:i + 1], Q[Q_STAGE][i:i + 1], state_row, info_row,
            Q[Q_WQE_AUX][i:i + 1], Q[Q_BOUNCE][i:i + 1])


@cuda.jit(device=True)
def qp_cache_load(Q, i, state_row, info_row):
    """Copies QP ``i``'s state and description into the rows ``qp_cached`` uses (one thread)."""
    for c in range(S_COLS):
        state_row[0, c] = Q[Q_STATE][i, c]
    for c in range(I_COLS):
        info_row[0, c] = Q[Q_INFO][i, c]


@cuda.jit(device=True)
def qp_cache_store(Q, i, state_row):
    """Writes the cached state back to QP ``i``'s row, for the next kernel (one thread);
    the CQ's doorbell record then holds every CQE consumed."""
    _publish_ci(Q[Q_CQDB][i], state_row, 0)
    for c in range(S_COLS):
        Q[Q_STATE][i, c] = state_row[0, c]


@cuda.jit(device=True)
def qp_in_error(Q, i):
    """True once the NIC has moved QP ``i`` to the error state."""
    return ld_acquire_sys_u32(Q[Q_STATUS][i], _ST_STATE) == _QPS_ERR


@cuda.jit(device=True)
def stage_lead(nbytes, slot_bytes):
    """Bytes before a message's staging header in its first slot: 0, or 112 so that a
    large payload starts on a 128-byte line (see ``gw_stage_hdr`` in gw_layouts.h)."""
    if nbytes >= _ALIGN_MIN and slot_bytes >= _ALIGN:   # slot sizes are powers of two
        return _ALIGN - _HDR_WORDS * 4
    return 0


@cuda.jit(device=True)
def stage_payload_word(Q, i, first_word, nbytes):
    """The staging word where a payload of ``nbytes`` starts, in the slots claimed at
    ``first_word``: after its lead (``stage_lead``) and its header."""
    return first_word + (stage_lead(nbytes, Q[Q_INFO][i, I_SLOT_BYTES]) >> 2) + _HDR_WORDS


@cuda.jit(device=True)
def stage_reserve(Q, i, nbytes, timeout_ns):
    """Claims staging slots for a payload of ``nbytes``; returns (status, first word, slots).

    Waits until the slots are free (``_stage_wait``). A run of slots never wraps the
    ring's end: the slots skipped at the end count as padding and are returned with the
    message. This runs on one thread per message, so it is written for latency: slot
    arithmetic uses shifts and compares (a 64-bit division costs ~100 ns), and every value
    is read before the one branch the common case takes (a branch on a value just loaded
    waits for it, and a chain of them cost ~190 ns on an H200, BENCHMARKS.md, session 4).
    """
    state = Q[Q_STATE]
    info = Q[Q_INFO]
    slots = info[i, I_SLOTS]
    slot_bytes = info[i, I_SLOT_BYTES]
    shift = info[i, I_SLOT_SHIFT]
    cqe_credits = info[i, I_STAGE_CQE] != 0
    res = state[i, S_STAGE_RES]
    pos = state[i, S_STAGE_POS]
    freed = state[i, S_STAGE_FREED]
    need = (stage_lead(nbytes, slot_bytes) + nbytes + _HDR_WORDS * 4 + slot_bytes - 1) >> shift
    # With credits from completions, up to a quarter of the ring may be claimed by WQEs
    # that ask for none (``stage_signal``): a run may take the other three quarters.
    limit = slots - (slots >> 2) if cqe_credits else slots
    pad = ring_pad(pos, slots, need)
    total = pad + need
    if (need > limit) | (freed < ring_free_target(res, pad, need, slots)):
        if need > limit:
            return E_TOO_LARGE, 0, 0
        st = _stage_wait(Q, i, ring_free_target(res, pad, need, slots), cqe_credits,
                         timeout_ns)
        if st != OK:
            return st, 0, 0
    state[i, S_STAGE_RES] = res + total
    first = 0 if pad else pos
    end = first + need
    state[i, S_STAGE_POS] = 0 if end == slots else end
    return OK, first << (shift - 2), total


@cuda.jit(device=True)
def _stage_wait(Q, i, target, cqe_credits, timeout_ns):
    """Waits until the NIC has returned staging slots up to ``target`` (S_STAGE_FREED):
    consuming completions (``I_STAGE_CQE``, see ``stage_aux``) or polling the credit
    counter in the NIC's status line."""
    if cqe_credits:
        if target > Q[Q_STATE][i, S_STAGE_SIG]:
            # Slots up to ``target`` are held by WQEs posted unsignaled, whose completions
            # nobody asked for (a run that wraps can need all of them): ask now.
            st = _stage_nop(Q, i, timeout_ns)
            if st != OK:
                return st
        return _poll_cq_until(Q, i, S_STAGE_FREED, target, timeout_ns, E_TIMEOUT_STAGING,
                              _SPACE_POLL_MAX_NS)
    state = Q[Q_STATE]
    flush_doorbell(Q, i)   # the NIC returns slots only for WQEs it has been told of
    start = globaltimer_ns()
    polls = 0
    pause = _POLL_NS
    while True:
        freed = ld_acquire_sys_u32(Q[Q_STATUS][i], _ST_FREED)
        # The NIC's counter is 32 bits; extend it against our 64-bit copy.
        seen = state[i, S_STAGE_FREED]
        seen = seen + ((freed - seen) & 0xFFFFFFFF)
        state[i, S_STAGE_FREED] = seen
        if seen >= target:
            return OK
        # Every host read is a PCIe round trip that shares the link with the payload
        # writes: the QP state is read on every eighth poll only.
        polls += 1
        if (polls & 7) == 0 and qp_in_error(Q, i):
            return E_QP_ERROR
        if globaltimer_ns() - start > timeout_ns:
            return E_TIMEOUT_STAGING
        backoff(pause)
        pause = min(2 * pause, _SPACE_POLL_MAX_NS)


@cuda.jit(device=True)
def _stage_nop(Q, i, timeout_ns):
    """Posts a signaled NOP WQE whose completion returns every staging slot claimed so
    far (``I_STAGE_CQE``). Room is kept for the pushed WQE the caller has reserved."""
    st = sq_reserve(Q, i, 2, timeout_ns)
    if st != OK:
        return st
    state = Q[Q_STATE]
    pi = state[i, S_PI]
    qpn = Q[Q_INFO][i, I_QPN]
    _ctrl(Q[Q_SQ][i], (pi & (Q[Q_INFO][i, I_SQ_BBS] - 1)) * _BB_WORDS, _OP_NOP, pi, qpn, 1, True)
    _commit_wqe(Q, i, pi, 1, AUX_STAGE | state[i, S_STAGE_RES],
                bswap32(qpn << 8 | 1) << 32 | bswap32((pi & 0xFFFF) << 8 | _OP_NOP))
    state[i, S_STAGE_SIG] = state[i, S_STAGE_RES]
    return OK


@cuda.jit(device=True)
def stage_signal(Q, i, signaled):
    """Whether the pushed WQE posted after this ``stage_reserve`` asks for a completion:
    ``signaled``, or, where staging credits come back with completions (``I_STAGE_CQE``),
    once a quarter of the ring has been claimed since the last signaled one. Unsignaled
    WQEs then never hold more than a quarter of the ring, so a wait for slots is always
    answered by a completion already asked for (one thread; no branch, see
    ``stage_reserve``)."""
    state = Q[Q_STATE]
    res = state[i, S_STAGE_RES]
    last = state[i, S_STAGE_SIG]
    cqe_credits = Q[Q_INFO][i, I_STAGE_CQE] != 0
    ask = cqe_credits & (signaled | (res - last >= Q[Q_INFO][i, I_SLOTS] >> 2))
    state[i, S_STAGE_SIG] = res if ask else last
    return signaled | ask


@cuda.jit(device=True)
def stage_aux(Q, i):
    """The ``aux`` a pushed WQE carries, posted right after its ``stage_reserve``: where
    ``I_STAGE_CQE`` is set, its completion returns the staging slots claimed so far."""
    res = Q[Q_STATE][i, S_STAGE_RES]
    return (AUX_STAGE | res) if Q[Q_INFO][i, I_STAGE_CQE] != 0 else 0


@cuda.jit(device=True)
def stage_header(Q, i, first_word, nbytes, total_slots, wqe_index):
    """Writes the 16-byte staging header into the slots claimed at ``first_word`` (one
    thread); returns the payload's first word."""
    word = stage_payload_word(Q, i, first_word, nbytes)
    h = word - _HDR_WORDS
    seq = Q[Q_STATE][i, S_PUSH_SEQ]
    Q[Q_STATE][i, S_PUSH_SEQ] = seq + 1
    # One 16-byte store (words in gw_stage_hdr order, checked at import).
    st_v4_u32(Q[Q_STAGE][i], h, _MAGIC | (seq & 0xFFFF), nbytes, total_slots,
              (wqe_index & 0xFFFF) | ((_F_ALIGNED if h != first_word else 0) << 16))
    return word


@cuda.jit(device=True)
def stage_address(Q, i, word):
    """The NIC address of word ``word`` of QP ``i``'s staging region."""
    return Q[Q_INFO][i, I_STAGE_ADDR] + word * 4


@cuda.jit(device=True)
def copy_words(dst, dst_word, src, src_word, nwords):
    """Block-cooperative copy of ``nwords`` 32-bit words (every thread must call it);
    ``copy_bytes`` over the block."""
    copy_bytes(dst, dst_word, src, src_word, nwords * 4, cuda.threadIdx.x, cuda.blockDim.x)


# Which payloads one thread posts, as functions of the payload's size and its source's byte
# address alone: the kernels ask them of each message (``push_small_ok``, ``push_mid_ok``)
# and the host asks the same functions (their ``py_func``) of a whole table of messages at
# once when it picks a sending kernel
# (``gpuwrite.paths.kernels.kernel_scope``). So they are written with ``&`` rather than
# ``and`` or chained comparisons (which numpy arrays do not take) and call no other device
# function (which the host cannot call).
@cuda.jit(device=True)
def push_small_fits(nbytes):
    """Whether ``push_small`` (``staged_small``, ``inline_small``) sends a payload of
    ``nbytes``: 1 to ``SMALL_PUSH_BYTES``, from any word."""
    return (nbytes > 0) & (nbytes <= SMALL_PUSH_BYTES)


@cuda.jit(device=True)
def push_mid_fits(nbytes, address):
    """Whether ``push_mid`` (``staged_mid``, ``inline_mid``) sends a payload of ``nbytes``
    from byte ``address``: more than ``SMALL_PUSH_BYTES`` and at most ``MID_PUSH_BYTES``,
    from any word up to MID_REG_BYTES (held in registers, word by word where it is not
    whole aligned vectors), whole 16-byte words from a 16-byte aligned source beyond."""
    return (nbytes > SMALL_PUSH_BYTES) & (nbytes <= MID_PUSH_BYTES) & (
        (nbytes <= MID_REG_BYTES) | (((nbytes & 15) == 0) & ((address & 15) == 0)))


@cuda.jit(device=True)
def push_small_ok(src, src_word, nbytes):
    """Whether ``push_small`` sends this payload (the same answer on every thread)."""
    return push_small_fits(nbytes)


@cuda.jit(device=True)
def _fast16(src, src_word, nbytes):
    """Whether a small payload is whole 16-byte words from a 16-byte aligned source."""
    return (nbytes & 15) == 0 and (address_of(src, src_word) & 15) == 0


@cuda.jit(device=True)
def _load64_words(src, word, nwords):
    """``_load64`` from a source that need not be 16-byte aligned: up to 16 words as four
    vectors, the first ``nwords`` read (word loads, all in flight together), the rest
    zeros."""
    return (load_words_if(src, word, nwords), load_words_if(src, word + 4, nwords - 4),
            load_words_if(src, word + 8, nwords - 8), load_words_if(src, word + 12, nwords - 12))


@cuda.jit(device=True, inline="always")
def _load_small(src, src_word, nbytes):
    """Starts the reads of a payload of 1 to 64 bytes from any word (``push_small``'s,
    ``inline_small``'s): four 16-byte loads where it is whole 16-byte words from an aligned
    source, else up to 16 word loads, all in flight together. Returns (its 16-byte
    vectors, the last zero-filled past the payload's words, and how many there are)."""
    chunks = (nbytes + 15) >> 4
    if _fast16(src, src_word, nbytes):
        return _load64(src, src_word, chunks), chunks
    return _load64_words(src, src_word, (nbytes + 3) >> 2), chunks


@cuda.jit(device=True)
def _load64(src, word, chunks):
    """Up to 64 bytes of payload as four 16-byte words: the first ``chunks`` are read,
    the rest are zeros. The four loads are independent, so they are in flight together."""
    return (load16_if(src, word, chunks > 0), load16_if(src, word + 4, chunks > 1),
            load16_if(src, word + 8, chunks > 2), load16_if(src, word + 12, chunks > 3))


@cuda.jit(device=True)
def _store64(dst, word, x, chunks):
    """Stores the first ``chunks`` 16-byte words of ``x`` (from ``_load64``)."""
    store16_if(dst, word, x[0], chunks > 0)
    store16_if(dst, word + 4, x[1], chunks > 1)
    store16_if(dst, word + 8, x[2], chunks > 2)
    store16_if(dst, word + 12, x[3], chunks > 3)


@cuda.jit(device=True)
def push_claim(Q, i, nbytes, timeout_ns):
    """The space a pushed RDMA write needs, claimed on one thread: ``sq_reserve`` and
    ``stage_reserve``. Returns (status, the payload's first staging word, the slots'
    first word, slots). Nothing is written to host memory: ``push_describe`` writes the
    staging header and the WQE, and may come after the payload's stores, so that no
    barrier between claim and payload waits for a store to host memory (run 13)."""
    st = sq_reserve(Q, i, 1, timeout_ns)
    if st != OK:
        return st, 0, 0, 0
    st, first, slots = stage_reserve(Q, i, nbytes, timeout_ns)
    if st != OK:
        return st, 0, 0, 0
    return OK, stage_payload_word(Q, i, first, nbytes), first, slots


@cuda.jit(device=True)
def push_describe(Q, i, first, nbytes, slots, raddr, rkey, signaled):
    """Writes the staging header and the WQE of the push ``push_claim`` claimed ``slots``
    slots at ``first`` for (one thread, before the doorbell)."""
    word = stage_header(Q, i, first, nbytes, slots, Q[Q_STATE][i, S_PI])
    wqe_rdma_write(Q, i, stage_address(Q, i, word), Q[Q_INFO][i, I_STAGE_LKEY], nbytes,
                   raddr, rkey, stage_signal(Q, i, signaled), stage_aux(Q, i))


@cuda.jit(device=True)
def push_reserve(Q, i, nbytes, raddr, rkey, signaled, timeout_ns):
    """The bookkeeping of a pushed RDMA write, on one thread: ``push_claim`` and
    ``push_describe``. Returns (status, the payload's first staging word); the caller
    copies the payload there before the doorbell, which orders it before the NIC can see
    the WQE."""
    st, word, first, slots = push_claim(Q, i, nbytes, timeout_ns)
    if st != OK:
        return st, 0
    push_describe(Q, i, first, nbytes, slots, raddr, rkey, signaled)
    return OK, word


@cuda.jit(device=True)
def vector_words(nbytes):
    """Words of ``nbytes`` in whole 16-byte vectors: what a payload of ``nbytes`` takes of
    a ring it is written to with 16-byte stores."""
    return ((nbytes + 15) >> 4) << 2


@cuda.jit(device=True)
def staged_claim(Q, i, nbytes, timeout_ns):
    """host_staged's ``push_claim``: ``sq_reserve`` and ``bounce_reserve`` of whole 16-byte
    vectors (so that every run starts on a vector); returns (status, the payload's first
    bounce word). Nothing is written to host memory."""
    st = sq_reserve(Q, i, 1, timeout_ns)
    if st != OK:
        return st, 0
    return bounce_reserve(Q, i, vector_words(nbytes), timeout_ns)


@cuda.jit(device=True)
def staged_describe(Q, i, word, nbytes, raddr, rkey):
    """Writes the WQE of the host_staged write ``staged_claim`` claimed bounce ``word``
    for, signaled: its completion returns the bounce space (one thread)."""
    info = Q[Q_INFO]
    wqe_rdma_write(Q, i, info[i, I_BOUNCE_ADDR] + word * 4, info[i, I_BOUNCE_LKEY], nbytes,
                   raddr, rkey, True, Q[Q_STATE][i, S_BOUNCE_RES])


@cuda.jit(device=True)
def staged_reserve(Q, i, nbytes, raddr, rkey, timeout_ns):
    """host_staged's bookkeeping on one thread, as ``push_reserve`` is gpu_push's:
    ``staged_claim`` and ``staged_describe``. Returns (status, the payload's first bounce
    word); the caller copies the payload there before the doorbell."""
    st, word = staged_claim(Q, i, nbytes, timeout_ns)
    if st != OK:
        return st, 0
    staged_describe(Q, i, word, nbytes, raddr, rkey)
    return OK, word


@cuda.jit(device=True, inline="always")
def _reserve_into(Q, i, bounce, nbytes, raddr, rkey, signaled, timeout_ns):
    """``staged_reserve`` where ``bounce`` (a constant at every call: the other branch is
    dropped), else ``push_reserve``; returns (status, word, the ring the payload goes to,
    whether that word is 16-byte aligned). The staging ring's payloads always are; a bounce
    ring's are where its row is (``bounce_bytes`` need only be a multiple of 4)."""
    if bounce:
        st, word = staged_reserve(Q, i, nbytes, raddr, rkey, timeout_ns)
        ring = Q[Q_BOUNCE][i]
        return st, word, ring, (address_of(ring, word) & 15) == 0
    st, word = push_reserve(Q, i, nbytes, raddr, rkey, signaled, timeout_ns)
    return st, word, Q[Q_STAGE][i], True


@cuda.jit(device=True, inline="always")
def _small_into(Q, i, bounce, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns):
    """``push_small`` into the staging ring, or with ``bounce`` (a constant) into the
    bounce ring (``staged_small``)."""
    x, chunks = _load_small(src, src_word, nbytes)
    st, word, ring, aligned = _reserve_into(Q, i, bounce, nbytes, raddr, rkey, signaled,
                                            timeout_ns)
    if st != OK:
        return st
    if not aligned:
        copy_bytes(ring, word, src, src_word, nbytes, 0, 1)
        return OK
    # Whole vectors, the last zero-filled past the payload's words: the claim is whole
    # vectors (a bounce ring's, vector_words) or slots of 16-byte multiples after a 16-byte
    # header (staging), and the NIC reads ``nbytes`` of it.
    _store64(ring, word, x, chunks)
    return OK


@cuda.jit(device=True)
def push_small(Q, i, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns):
    """Posts a pushed RDMA write of a small payload from one thread; returns a status.

    For payloads that ``push_small_ok`` accepts: 1 to 64 bytes from any word. The same
    steps as the block path (``push_reserve``, then the payload), with no barrier. The
    payload is loaded before the bookkeeping, so its latency hides behind it
    (``_load_small``: vector loads, or word loads where it is not whole aligned vectors;
    until session 42 such a payload was read after the bookkeeping, and an 8 or 20-byte
    push took 0.5 to 0.7 us longer than a 64-byte one on an H200, BENCHMARKS.md), and
    stored as 16-byte vectors. The doorbell is the caller's (``ring_doorbell``, or
    ``flush_doorbell`` after a batch).
    """
    return _small_into(Q, i, False, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns)


@cuda.jit(device=True)
def staged_small(Q, i, src, src_word, nbytes, raddr, rkey, timeout_ns):
    """host_staged's ``push_small``: the payload into the bounce ring from one thread, the
    WQE signaled (``staged_reserve``); returns a status. host_staged differs from gpu_push
    in where the payload lies for the NIC, not in how the GPU writes it: the same one
    thread and no barrier (with the block's copy and its barriers a 64-byte host_staged
    write took 0.3 to 0.4 us longer than gpu_push's on an H200, BENCHMARKS.md, session
    37). The doorbell is the caller's."""
    return _small_into(Q, i, True, src, src_word, nbytes, raddr, rkey, True, timeout_ns)


@cuda.jit(device=True)
def push_mid_ok(src, src_word, nbytes):
    """Whether ``push_mid`` (``staged_mid``, ``inline_mid``) sends this payload
    (``push_mid_fits``)."""
    return push_mid_fits(nbytes, address_of(src, src_word))


@cuda.jit(device=True, inline="always")
def _mid_load(src, src_word, nbytes, buf):
    """Starts the reads of a mid payload that ``push_mid_fits`` accepts: the first
    MID_REG_VECTORS 16-byte vectors into registers (by 16-byte loads where the payload is
    whole aligned vectors, else, at most MID_REG_BYTES, by word loads, all in flight
    together), the rest of whole aligned vectors into ``buf`` by ``cp_async16`` (the caller
    waits for them, ``cp_async_wait_all``, where ``late``). Returns (the first four
    vectors, the next four, the last zero-filled past the payload's words; late; how many
    vectors the payload takes)."""
    chunks = (nbytes + 15) >> 4
    if not _fast16(src, src_word, nbytes):
        nwords = (nbytes + 3) >> 2
        return (_load64_words(src, src_word, nwords),
                _load64_words(src, src_word + 16, nwords - 16), False, chunks)
    x0 = _load64(src, src_word, chunks)
    x1 = _load64(src, src_word + 16, chunks - 4)
    late = chunks > MID_REG_VECTORS     # bytes past the first 128: read into buf
    if late:
        for k in range(MID_LATE_VECTORS):
            if MID_REG_VECTORS + k < chunks:
                cp_async16(buf, 4 * k, src, src_word + 4 * (MID_REG_VECTORS + k))
    return x0, x1, late, chunks


@cuda.jit(device=True, inline="always")
def _mid_into(Q, i, bounce, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns, buf):
    """``push_mid`` into the staging ring, or with ``bounce`` (a constant) into the bounce
    ring (``staged_mid``)."""
    x0, x1, late, chunks = _mid_load(src, src_word, nbytes, buf)
    st, word, ring, aligned = _reserve_into(Q, i, bounce, nbytes, raddr, rkey, signaled,
                                            timeout_ns)
    if late:
        cp_async_wait_all()     # no read outlives the call, whatever its status
    if st != OK:
        return st
    if not aligned:
        copy_bytes(ring, word, src, src_word, nbytes, 0, 1)
        return OK
    _store64(ring, word, x0, chunks)
    _store64(ring, word + 16, x1, chunks - 4)
    if late:
        for k in range(MID_LATE_VECTORS):
            store16_if(ring, word + 4 * (MID_REG_VECTORS + k), ld_v4_u32(buf, 4 * k),
                       MID_REG_VECTORS + k < chunks)
    return OK


@cuda.jit(device=True)
def push_mid(Q, i, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns, buf):
    """Posts a pushed RDMA write that ``push_mid_ok`` accepts from one thread, as
    ``push_small`` does; returns a status. Every byte is read before the bookkeeping
    (``_mid_load``): the first 128 into registers, the rest into ``buf`` (a 16-byte
    aligned shared array of at least MID_BUF_WORDS words) by ``cp_async16``, which holds
    no register across the bookkeeping. Holding all 256 bytes in registers spilled the
    kernel at its register cap; reading the last 128 after the bookkeeping put a read from
    GPU memory on the push's path (BENCHMARKS.md, session 34). Until session 43 a payload
    of 65 to 128 bytes that was not whole aligned vectors went to the first warp, whose
    general code for partial vectors made a 100-byte push 1.5 us slower than a 128-byte
    one on an H200; past 128 bytes such a payload still does (word by word ``cp.async``
    was slower there than the warp, session 42). The doorbell is the caller's."""
    return _mid_into(Q, i, False, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns, buf)


@cuda.jit(device=True)
def staged_mid(Q, i, src, src_word, nbytes, raddr, rkey, timeout_ns, buf):
    """host_staged's ``push_mid`` (see ``staged_small``): a payload ``push_mid_ok``
    accepts, into the bounce ring from one thread; returns a status."""
    return _mid_into(Q, i, True, src, src_word, nbytes, raddr, rkey, True, timeout_ns, buf)


@cuda.jit(device=True)
def sq_reserve(Q, i, nbb, timeout_ns):
    """Waits until ``nbb`` basic blocks of send queue are free; returns a status."""
    target = Q[Q_STATE][i, S_PI] + nbb - Q[Q_INFO][i, I_SQ_BBS]
    return _poll_cq_until(Q, i, S_DONE, target, timeout_ns, E_TIMEOUT_SQ, _POLL_NS)


@cuda.jit(device=True)
def _ctrl(sq, base, opcode, wqe_index, qpn, ds, signaled):
    """Writes a control segment (one 16-byte store)."""
    st_v4_u32(sq, base, bswap32((wqe_index & 0xFFFF) << 8 | opcode), bswap32(qpn << 8 | ds),
              (_CQ_UPDATE << _FM_SHIFT) if signaled else 0, 0)


@cuda.jit(device=True)
def _raddr(sq, base, raddr, rkey):
    """Writes a remote-address segment (one 16-byte store)."""
    st_v4_u32(sq, base + _W_RADDR, bswap32(raddr >> 32), bswap32(raddr), bswap32(rkey), 0)


@cuda.jit(device=True)
def _doorbell_value(pi, qpn, ds):
    """The first 8 bytes of an RDMA-write WQE's control segment: what the doorbell
    register receives (words 0 and 1 as the GPU stores them)."""
    return bswap32(qpn << 8 | ds) << 32 | bswap32((pi & 0xFFFF) << 8 | _OP_WRITE)


@cuda.jit(device=True)
def _commit_wqe(Q, i, pi, nbb, aux, first_words):
    """Records a written WQE: its completion bookkeeping and the doorbell value."""
    mask = Q[Q_INFO][i, I_SQ_BBS] - 1
    Q[Q_WQE_AUX][i, pi & mask] = nbb << 40 | aux
    Q[Q_STATE][i, S_LAST_PI] = pi
    Q[Q_STATE][i, S_LAST_AUX] = nbb << 40 | aux
    Q[Q_STATE][i, S_DB_WORD] = first_words
    Q[Q_STATE][i, S_PI] = pi + nbb


@cuda.jit(device=True)
def wqe_rdma_write(Q, i, laddr, lkey, nbytes, raddr, rkey, signaled, aux):
    """Builds a one-BB RDMA-write WQE at the producer index (one thread); returns its
    WQE index.

    ``aux`` is remembered for this WQE and handed back by completion: the cursor of the
    bounce or staging ring that its completion frees (``AUX_STAGE``). Call
    ``sq_reserve`` first; the WQE is not visible until the doorbell.
    """
    pi = Q[Q_STATE][i, S_PI]
    qpn = Q[Q_INFO][i, I_QPN]
    sq = Q[Q_SQ][i]
    base = (pi & (Q[Q_INFO][i, I_SQ_BBS] - 1)) * _BB_WORDS
    # Four 16-byte stores, one per segment and one for the padding: the 16 word stores
    # they replace were 16 bus writes from one thread (a loop over the words with a branch
    # per field measured 10x slower still on an H200, BENCHMARKS.md, run 14).
    _ctrl(sq, base, _OP_WRITE, pi, qpn, 3, signaled)
    _raddr(sq, base, raddr, rkey)
    st_v4_u32(sq, base + _W_DATA, bswap32(nbytes), bswap32(lkey), bswap32(laddr >> 32),
              bswap32(laddr))
    st_v4_u32(sq, base + _W_DATA + 4, 0, 0, 0, 0)
    _commit_wqe(Q, i, pi, 1, aux, _doorbell_value(pi, qpn, 3))
    return pi & 0xFFFF


@cuda.jit(device=True)
def inline_ds(nbytes):
    """16-byte segments of an inline RDMA-write WQE of ``nbytes``: control, remote address,
    the inline header word and the payload (the control segment's DS count)."""
    return (_W_DATA * 4 + 4 + nbytes + _DS - 1) // _DS


@cuda.jit(device=True)
def inline_bbs(nbytes):
    """Basic blocks an inline RDMA-write WQE of ``nbytes`` occupies."""
    return (inline_ds(nbytes) * _DS + _BB_WORDS * 4 - 1) // (_BB_WORDS * 4)


@cuda.jit(device=True)
def inline_units(nbytes):
    """16-byte units of an inline WQE's data segment: its header word and ``nbytes``."""
    return (4 + nbytes + _DS - 1) // _DS


@cuda.jit(device=True, inline="always")
def _inline_unit(sq, mask, pi, u, lead, v, chunks, units):
    """Stores 16-byte unit ``u`` of an inline WQE's data segment of ``units`` units
    (``inline_units``), where unit 0 is the one after the remote address: ``lead`` (the
    word before payload vector ``u``: the inline header for unit 0, else vector u - 1's
    last word) and ``v``'s first three words where u < chunks (the payload's vectors, the
    last zero-filled past the payload's last word), ``lead`` and three words of zeros past
    them; nothing
    at or past ``units``, which is the WQE's end (the next BB may be a WQE the NIC has not
    read). Each unit lies in the WQE's basic block ``(pi + its BB) & mask``, so a WQE
    wraps the ring BB by BB. Returns the word unit u + 1 leads with."""
    at = _W_DATA // 4 + u               # 16-byte units from the WQE's start
    word = ((pi + (at >> 2)) & mask) * _BB_WORDS + (at & 3) * 4
    if u < chunks:
        if u < units:
            st_v4_u32(sq, word, lead, v[0], v[1], v[2])
        return v[3]
    if u < units:
        z = uint32(0)
        st_v4_u32(sq, word, lead, z, z, z)
    return lead


@cuda.jit(device=True, inline="always")
def _inline_vectors(sq, mask, pi, u, lead, x, chunks, units):
    """``_inline_unit`` for units u to u + 3 with payload vectors ``x[0]`` to ``x[3]``;
    returns the word unit u + 4 leads with."""
    lead = _inline_unit(sq, mask, pi, u, lead, x[0], chunks, units)
    lead = _inline_unit(sq, mask, pi, u + 1, lead, x[1], chunks, units)
    lead = _inline_unit(sq, mask, pi, u + 2, lead, x[2], chunks, units)
    return _inline_unit(sq, mask, pi, u + 3, lead, x[3], chunks, units)


@cuda.jit(device=True, inline="always")
def _inline_head(Q, i, nbytes, raddr, rkey, signaled):
    """Writes the control and remote-address segments of an inline write of ``nbytes`` at
    the producer index (one thread, ``sq_reserve`` taken); returns (the send queue, its
    BB mask, the producer index, the inline header word the payload's units lead with)."""
    pi = Q[Q_STATE][i, S_PI]
    mask = Q[Q_INFO][i, I_SQ_BBS] - 1
    sq = Q[Q_SQ][i]
    base = (pi & mask) * _BB_WORDS
    _ctrl(sq, base, _OP_WRITE, pi, Q[Q_INFO][i, I_QPN], inline_ds(nbytes), signaled)
    _raddr(sq, base, raddr, rkey)
    return sq, mask, pi, bswap32(nbytes | _INLINE_FLAG)


@cuda.jit(device=True, inline="always")
def _inline_commit(Q, i, pi, nbytes):
    """Records an inline WQE of ``nbytes`` written at ``pi`` (``_commit_wqe``)."""
    _commit_wqe(Q, i, pi, inline_bbs(nbytes), 0,
                _doorbell_value(pi, Q[Q_INFO][i, I_QPN], inline_ds(nbytes)))


@cuda.jit(device=True)
def inline_small(Q, i, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns):
    """Posts an inline RDMA write of a small payload from one thread; returns a status.

    For payloads that ``push_small_ok`` accepts: 1 to 64 bytes from any word. The payload's
    loads go first (their latency hides behind the SQ check): four 16-byte loads where it
    is whole 16-byte words from an aligned source, else up to 16 word loads, in flight
    together. Then the WQE is three to seven 16-byte stores and no barrier: the
    block-cooperative ``wqe_rdma_write_inline`` takes two block barriers after its stores
    to host memory, each of which waits for them (0.2 to 0.5 us, run 13), and made a
    64-byte inline write slower than a pushed one (BENCHMARKS.md, session 9). The payload
    starts one word after the inline segment's byte count, so the registers are shifted by
    one word into the WQE's 16-byte words (``_inline_unit``); bytes past the payload in its
    last word are the source's, inside the WQE's padding, which the NIC does not deliver.
    Its second BB may wrap to the ring's start. The doorbell is the caller's.
    """
    x, chunks = _load_small(src, src_word, nbytes)
    st = sq_reserve(Q, i, inline_bbs(nbytes), timeout_ns)
    if st != OK:
        return st
    units = inline_units(nbytes)
    sq, mask, pi, w = _inline_head(Q, i, nbytes, raddr, rkey, signaled)
    w = _inline_vectors(sq, mask, pi, 0, w, x, chunks, units)
    _inline_unit(sq, mask, pi, 4, w, x[3], chunks, units)   # the last unit's padding, at 64 B
    _inline_commit(Q, i, pi, nbytes)
    return OK


@cuda.jit(device=True)
def inline_mid(Q, i, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns, buf):
    """Posts an inline RDMA write that ``push_mid_ok`` accepts (more than 64 bytes, from any
    word up to 128, whole aligned 16-byte words up to ``MID_PUSH_BYTES``) from one thread,
    as ``push_mid`` pushes one; returns a status. Every byte is read before the SQ check
    (``_mid_load``); then the WQE is at most 19 16-byte stores, shifted by the inline
    header word as ``inline_small``'s, and no barrier. The block-cooperative
    ``wqe_rdma_write_inline`` these sizes took before (two block barriers after its stores
    to host memory) put a 256-byte inline write 0.8 us behind a pushed one of the same
    size on an H200 (4.29 against 3.49 us, BENCHMARKS.md, session 41). The doorbell is the
    caller's."""
    x0, x1, late, chunks = _mid_load(src, src_word, nbytes, buf)
    st = sq_reserve(Q, i, inline_bbs(nbytes), timeout_ns)
    if late:
        cp_async_wait_all()     # no read outlives the call, whatever its status
    if st != OK:
        return st
    units = inline_units(nbytes)
    sq, mask, pi, w = _inline_head(Q, i, nbytes, raddr, rkey, signaled)
    w = _inline_vectors(sq, mask, pi, 0, w, x0, chunks, units)
    w = _inline_vectors(sq, mask, pi, 4, w, x1, chunks, units)
    for k in range(MID_LATE_VECTORS):
        w = _inline_unit(sq, mask, pi, MID_REG_VECTORS + k, w, ld_v4_u32(buf, 4 * k), chunks,
                         units)
    _inline_unit(sq, mask, pi, MID_REG_VECTORS + MID_LATE_VECTORS, w, x1[3], chunks, units)
    _inline_commit(Q, i, pi, nbytes)
    return OK


@cuda.jit(device=True)
def post_small(Q, i, inline, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns):
    """``inline_small`` or ``push_small``: all of a write that ``push_small_ok`` accepts, on
    one thread, with no barrier; returns a status. The doorbell is the caller's."""
    if inline:
        return inline_small(Q, i, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns)
    return push_small(Q, i, src, src_word, nbytes, raddr, rkey, signaled, timeout_ns)


@cuda.jit(device=True)
def wqe_rdma_write_inline(Q, i, src, src_word, nbytes, raddr, rkey, signaled):
    """Builds an inline RDMA-write WQE (block-cooperative); returns its WQE index.

    The payload travels inside the WQE, as BlueFlame writes do. Every thread calls this;
    thread 0 writes the segments and the others help copy the payload.
    """
    state = Q[Q_STATE]
    info = Q[Q_INFO]
    pi = state[i, S_PI]
    mask = info[i, I_SQ_BBS] - 1
    sq = Q[Q_SQ][i]
    ds = inline_ds(nbytes)
    nbb = inline_bbs(nbytes)
    # The payload sits from word _W_DATA + 1 on, BB by BB around the ring: two
    # contiguous runs where it wraps the ring's end.
    ring_words = (mask + 1) * _BB_WORDS
    at = (pi & mask) * _BB_WORDS + _W_DATA + 1
    first = min(nbytes, (ring_words - at) * 4)
    copy_bytes(sq, at, src, src_word, first, cuda.threadIdx.x, cuda.blockDim.x)
    copy_bytes(sq, 0, src, src_word + first // 4, nbytes - first, cuda.threadIdx.x,
               cuda.blockDim.x)
    if cuda.threadIdx.x == 0:
        base = (pi & mask) * _BB_WORDS
        _ctrl(sq, base, _OP_WRITE, pi, info[i, I_QPN], ds, signaled)
        _raddr(sq, base, raddr, rkey)
        sq[base + _W_DATA] = bswap32(nbytes | _INLINE_FLAG)
    cuda.syncthreads()   # every thread has read the producer index before it moves
    if cuda.threadIdx.x == 0:
        _commit_wqe(Q, i, pi, nbb, 0, _doorbell_value(pi, info[i, I_QPN], ds))
    cuda.syncthreads()
    return pi & 0xFFFF


@cuda.jit(device=True)
def ring_doorbell(Q, i):
    """Publishes every WQE written so far on QP ``i`` to the NIC (one thread).

    The doorbell record is a system-scope release store: it orders the payload and WQE
    writes of this thread, and (release is cumulative) those of the block's threads that
    synchronised with it through ``cuda.syncthreads()``, before the NIC can see the new
    producer index. The engine checks this on every pushed message: a staging header
    that is not yet visible fails the WQE with reason ``bad_staging``.

    The 8-byte doorbell register write (the first 8 bytes of the last WQE's control
    segment, as mlx5 expects) follows. Where the register is a real NIC's
    (``I_DB_MMIO``, testbed mode) a system fence orders the record before it, as
    rdma-core's ``mmio_wc_start`` does between the same two writes: without it the NIC
    could fetch before the WQE is visible. The emulated engine reads the record, never
    the register word, so there the fence (about 0.5 us) is skipped.
    """
    pi = Q[Q_STATE][i, S_PI]
    st_release_sys_u32(Q[Q_DBREC][i], _DB_SEND, bswap32(pi & 0xFFFF))
    if Q[Q_INFO][i, I_DB_MMIO] != 0:
        fence_sys()
    st_relaxed_sys_u64(Q[Q_UAR], i, Q[Q_STATE][i, S_DB_WORD])
    Q[Q_STATE][i, S_DB_PI] = pi
    # After the doorbell, not before: the consumer index is not on the doorbell's path.
    cq_publish(Q, i)


@cuda.jit(device=True)
def flush_doorbell(Q, i):
    """Rings the doorbell if WQEs were written since the last one (one thread)."""
    if Q[Q_STATE][i, S_PI] != Q[Q_STATE][i, S_DB_PI]:
        ring_doorbell(Q, i)


@cuda.jit(device=True)
def cq_publish(Q, i):
    """Hands every consumed CQE back to the NIC: writes the consumer index into the CQ's
    doorbell record if it moved since the last write (one thread).

    ``poll_cq`` does not write it per CQE: it is published by the next doorbell (after
    the doorbell's own stores), at an error completion, and when a kernel hands the QP
    back (``qp_cache_store``). The NIC never finds the CQ full for it: every CQE produced
    after a publish is for a WQE announced by then and not yet retired, and those occupy
    at most sq_bbs <= ncqe BBs (both QueueSets refuse a smaller CQ). Writing it per CQE put a store to host memory right before the barrier
    that ends a warp's wait (``api.quiet``), and a barrier waits for such a store: 0.23
    to 0.26 us per message on an H100 (BENCHMARKS.md, session 9).

    No release fence (it costs ~0.5 us on the bus): the only accesses this store must
    follow are the CQEs' acquire loads, and a later store never moves before an acquire
    load.
    """
    _publish_ci(Q[Q_CQDB][i], Q[Q_STATE], i)


@cuda.jit(device=True)
def _publish_ci(cqdb, state, r):
    """``cq_publish`` on state row ``r`` (global or a block's cached row)."""
    ci = state[r, S_CQ_CI]
    if state[r, S_CQ_PUB] != ci:
        st_relaxed_sys_u32(cqdb, _CQDB_CI, bswap32(ci & 0xFFFFFF))
        state[r, S_CQ_PUB] = ci


@cuda.jit(device=True)
def poll_cq(Q, i):
    """Consumes at most one completion of QP ``i``'s CQ.

    Returns 1 if a successful completion was consumed, 0 if none was ready, or
    ``E_CQE_ERROR`` for an error completion (its syndrome and reason are kept in the
    QP state's ``S_LAST_SYND``). Completions retire every WQE up to the one they name.
    A consumed CQE is handed back to the NIC later (``cq_publish``).
    """
    state = Q[Q_STATE]
    info = Q[Q_INFO]
    cq = Q[Q_CQ][i]
    ci = state[i, S_CQ_CI]
    ncqe = info[i, I_NCQE]
    base = (ci & (ncqe - 1)) * _CQE_WORDS
    tail = ld_acquire_sys_u32(cq, base + _CQE_TAIL)
    op_own = tail >> 24
    if (op_own >> 4) == _CQE_INVALID or (op_own & 1) != ((ci >> info[i, I_LOG_NCQE]) & 1):
        return 0
    counter = ((tail & 0xFF) << 8) | ((tail >> 8) & 0xFF)
    # The completion of the last WQE written (every completion of a one-at-a-time
    # sender) finds its bookkeeping in the QP state, not in Q_WQE_AUX: a posting block
    # keeps the state in shared memory, and a global load here is on the latency path.
    if counter == (state[i, S_LAST_PI] & 0xFFFF):
        aux = state[i, S_LAST_AUX]
    else:
        aux = Q[Q_WQE_AUX][i, counter & (info[i, I_SQ_BBS] - 1)]
    done = state[i, S_DONE]
    end = counter + (aux >> 40)
    state[i, S_DONE] = done + ((end - done) & 0xFFFF)
    freed = S_STAGE_FREED if aux & AUX_STAGE else S_BOUNCE_FREE
    if (aux & AUX_CURSOR) > state[i, freed]:
        state[i, freed] = aux & AUX_CURSOR
    state[i, S_LAST_CQE] = counter
    state[i, S_CQ_CI] = ci + 1
    err = (op_own >> 4) == _CQE_REQ_ERR
    if err:
        synd = ld_acquire_sys_u32(cq, base + _CQE_SYND)
        state[i, S_LAST_SYND] = (synd >> 24) << 8 | ((synd >> 16) & 0xFF)
    if err:
        cq_publish(Q, i)    # the QP is in error: nothing is announced after this
        return E_CQE_ERROR
    return 1


@cuda.jit(device=True)
def _poll_cq_until(Q, i, column, target, timeout_ns, timeout_error, pause_max_ns):
    """Consumes completions until QP state ``column`` reaches ``target``.

    WQEs written but not yet announced are announced first: their completions may be
    what the wait needs. A wait for every WQE written (``wait_done``) lets
    ``I_POLL_DELAY_NS`` (with I_POLL_ADAPT, adjusted by ``S_POLL_ADJ``) pass before its
    first poll: the newest WQE's completion cannot be there sooner. A wait for space (SQ,
    staging, bounce) polls at once: the completion it needs is most often written
    already, and there a pause is lost time (300 ns before every such wait took the
    64-byte rate from 37-68 to 23-39 M/s on one H100 host, BENCHMARKS.md, session 23).
    Between empty polls the thread pauses (after ``_EAGER_POLLS`` polls), from
    ``_POLL_NS`` doubling up to ``pause_max_ns``. Returns OK, an error completion's code,
    or ``timeout_error``.
    """
    state = Q[Q_STATE]
    if state[i, column] >= target:
        return OK
    flush_doorbell(Q, i)
    start = globaltimer_ns()
    info = Q[Q_INFO]
    whole = column == S_DONE and target >= state[i, S_PI]
    delay = info[i, I_POLL_DELAY_NS] + state[i, S_POLL_ADJ] if whole else 0
    while globaltimer_ns() - start < delay:
        pass
    pause = _POLL_NS
    polls = 0
    while state[i, column] < target:
        st = poll_cq(Q, i)
        if st < 0:
            return st
        if st == 0:
            if globaltimer_ns() - start > timeout_ns:
                return timeout_error
            polls += 1
            if polls > _EAGER_POLLS:
                backoff(pause)
                pause = min(2 * pause, pause_max_ns)
    if whole and info[i, I_POLL_ADAPT] != 0:
        state[i, S_POLL_ADJ] = next_poll_adj(state[i, S_POLL_ADJ], info[i, I_POLL_DELAY_NS],
                                             polls == 0)
    return OK


@cuda.jit(device=True)
def next_poll_adj(adj, delay_ns, first_poll_found):
    """The first-poll pause's adjustment (S_POLL_ADJ) after a wait for every WQE written
    (I_POLL_ADAPT): ``_PAUSE_DOWN_NS`` less if its first poll found what it waited for,
    ``_PAUSE_UP_NS`` more if not; the pause, ``delay_ns`` + the adjustment, stays within
    0 .. ``_PAUSE_MAX_NS``."""
    if first_poll_found:
        return max(adj - _PAUSE_DOWN_NS, -delay_ns)
    return min(adj + _PAUSE_UP_NS, _PAUSE_MAX_NS - delay_ns)


@cuda.jit(device=True)
def wait_done(Q, i, target_pi, timeout_ns):
    """Waits until every WQE before producer index ``target_pi`` has completed."""
    return _poll_cq_until(Q, i, S_DONE, target_pi, timeout_ns, E_TIMEOUT_CQE, _POLL_NS)


@cuda.jit(device=True)
def bounce_reserve(Q, i, nwords, timeout_ns):
    """Claims ``nwords`` of QP ``i``'s host bounce ring (host_staged); returns (status, word).

    Space comes back as the WQEs that used it complete. Runs never wrap the ring's end:
    one that does not fit starts at word 0, the skipped words counted as used. Written
    for latency as ``stage_reserve`` is: the ring position is kept (S_BOUNCE_POS), not
    taken modulo the ring's size, which need not be a power of two (the two 64-bit
    modulos it replaced cost a host_staged write 0.2 to 0.4 us on an H200, BENCHMARKS.md,
    session 37), and every value is read before the one branch the common case takes.
    """
    state = Q[Q_STATE]
    ring = Q[Q_INFO][i, I_BOUNCE_WORDS]
    res = state[i, S_BOUNCE_RES]
    pos = state[i, S_BOUNCE_POS]
    freed = state[i, S_BOUNCE_FREE]
    pad = ring_pad(pos, ring, nwords)
    if (nwords > ring) | (freed < ring_free_target(res, pad, nwords, ring)):
        if nwords > ring:
            return E_TOO_LARGE, 0
        st = _poll_cq_until(Q, i, S_BOUNCE_FREE, ring_free_target(res, pad, nwords, ring),
                            timeout_ns, E_TIMEOUT_BOUNCE, _SPACE_POLL_MAX_NS)
        if st != OK:
            return st, 0
    state[i, S_BOUNCE_RES] = res + pad + nwords
    first = 0 if pad else pos
    end = first + nwords
    state[i, S_BOUNCE_POS] = 0 if end == ring else end
    return OK, first
