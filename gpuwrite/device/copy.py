"""A device copy at the pace of the bus: 16-byte vectors, several loads in flight.

``copy_bytes`` moves a payload from GPU memory into memory another agent reads (the
NIC's staging region, a host bounce ring, a WQE, the engine's pull buffer). Threads
``rank`` 0 to ``nranks - 1`` share the work: a warp passes its lane and 32, a block its
``threadIdx.x`` and ``blockDim.x``; every one of them must call it.

Why this shape: one block copying GPU memory into mapped host memory moved 1 MiB at
6.1 GB/s with one 4-byte word per thread per iteration, each load waited for before its
store, and at 41.8 GB/s with 16-byte loads, four in flight per thread (H100, 256 threads;
one warp: 0.77 against 9.4 GB/s; ``/work/shared/calibration/h100-pcie5-2026-11.md``).
A store into host memory is posted, so what limits a block is how many bytes its loads
keep in flight, and a source read for the first time (from HBM, not L2) needs more: with
four in flight a 256-thread block moved such a source at 30.5 GB/s and a warp at 4.7,
with eight 42.8 and 8.3 (BENCHMARKS.md, session 19).

Layout of one copy, in 4-byte words of the destination:

  head   0 to 3 words, until the destination is 16-byte aligned (one word per thread)
  body   16-byte stores; 16-byte loads where the source is then 16-byte aligned too, else
         four word loads per vector (the loads come from GPU memory, which serves them
         from the same cache lines); ``UNROLL`` vectors loaded per thread before any is
         stored, then rounds of four, then one at a time
  tail   0 to 3 whole words, then the 1 to 3 bytes of a last partial word as byte stores

Every byte past ``nbytes`` at the destination keeps its value: a copy never writes a
byte it was not asked to, so two copies may end and begin inside one word.
"""
from __future__ import annotations

from numba import int64, uint32

from gpuwrite.cudaenv import cuda
from gpuwrite.device.intrinsics import address_of, ld_v4_u32, st_u8, st_v4_u32

# Vectors each thread loads before it stores any. On an H100 (BENCHMARKS.md, session 19),
# 1 MiB into mapped host memory, GB/s with 2 / 4 / 8 / 16 in flight per thread: a source
# in L2, one warp 5.5 / 9.7 / 15.3 / 20.9 and a 256-thread block 36 / 44 / 45 / 45; a source
# read for the first time, 2.5 / 4.7 / 8.3 / 12.3 and 18 / 30 / 43 / 44. Sixteen would
# take 64 registers for data alone; kernels that call the verbs are held to 128
# (``verbs.MAX_REGISTERS``), so eight. With 512 threads four moved a first read at 43.4 GB/s
# already (eight: 43.9), and the bench's 1 MiB runs (128 blocks of 512) had slow runs with
# eight that they did not have with four: 4 of 48 against 0 of 60 over sessions 19 and 20,
# two hosts (Fisher's exact test on the pooled counts, p about 0.04): groups of more than
# DEEP_GROUP_MAX threads keep four.
UNROLL = 8
DEEP_GROUP_MAX = 256


@cuda.jit(device=True, inline=True)
def _ld16(src, word, aligned):
    """Four words from ``src[word]``: one 16-byte load where ``aligned``, else four."""
    if aligned:
        return ld_v4_u32(src, word)
    return (src[word], src[word + 1], src[word + 2], src[word + 3])


@cuda.jit(device=True, inline=True)
def _st16(dst, word, x):
    st_v4_u32(dst, word, x[0], x[1], x[2], x[3])


@cuda.jit(device=True, inline=True)
def _ld4(src, s0, j, step, aligned):
    """Vectors j, j + step, j + 2 step and j + 3 step of ``src`` from word ``s0``: four
    loads issued before any of them is used."""
    return (_ld16(src, s0 + 4 * j, aligned), _ld16(src, s0 + 4 * (j + step), aligned),
            _ld16(src, s0 + 4 * (j + 2 * step), aligned),
            _ld16(src, s0 + 4 * (j + 3 * step), aligned))


@cuda.jit(device=True, inline=True)
def _st4(dst, d0, j, step, x):
    """Stores what ``_ld4`` loaded to the same vectors of ``dst`` from word ``d0``."""
    _st16(dst, d0 + 4 * j, x[0])
    _st16(dst, d0 + 4 * (j + step), x[1])
    _st16(dst, d0 + 4 * (j + 2 * step), x[2])
    _st16(dst, d0 + 4 * (j + 3 * step), x[3])


@cuda.jit(device=True)
def _copy_vectors(dst, d0, src, s0, nvec, rank, nranks, aligned):
    """Copies ``nvec`` 16-byte vectors from word ``s0`` to word ``d0`` (16-byte aligned)."""
    j = rank
    step = nranks
    # Groups of up to DEEP_GROUP_MAX threads keep UNROLL (8) loads in flight per thread,
    # larger ones four (which already fill the bus with 512 threads); the stores follow.
    # Vectors of one round are ``nranks`` apart, so a warp's accesses stay contiguous
    # (coalesced) in each. In named tuples: a register array indexed in a loop would go
    # to local memory.
    if nranks <= DEEP_GROUP_MAX:
        while j + 7 * step < nvec:
            a = _ld4(src, s0, j, step, aligned)
            b = _ld4(src, s0, j + 4 * step, step, aligned)
            _st4(dst, d0, j, step, a)
            _st4(dst, d0, j + 4 * step, step, b)
            j += 8 * step
    while j + 3 * step < nvec:
        _st4(dst, d0, j, step, _ld4(src, s0, j, step, aligned))
        j += 4 * step
    while j < nvec:
        _st16(dst, d0 + 4 * j, _ld16(src, s0 + 4 * j, aligned))
        j += step


@cuda.jit(device=True)
def copy_bytes(dst, dst_word, src, src_word, nbytes, rank, nranks):
    """Copies ``nbytes`` (>= 0) from ``src`` at word ``src_word`` to ``dst`` at word
    ``dst_word`` (uint32 arrays in global memory), shared by threads ``rank`` of
    ``nranks``; byte-exact at the destination. No barrier: the caller orders the stores
    (``cuda.syncthreads()`` or ``cuda.syncwarp()`` before the release that publishes)."""
    if nbytes <= 0:
        return
    words = nbytes >> 2
    head = (4 - ((int64(address_of(dst, dst_word)) >> 2) & 3)) & 3
    if head > words:
        head = words
    k = rank
    while k < head:
        dst[dst_word + k] = src[src_word + k]
        k += nranks
    nvec = (words - head) >> 2
    d0 = dst_word + head
    s0 = src_word + head
    if (int64(address_of(src, s0)) & 15) == 0:
        _copy_vectors(dst, d0, src, s0, nvec, rank, nranks, True)
    else:
        _copy_vectors(dst, d0, src, s0, nvec, rank, nranks, False)
    # The last threads take the tail, the first ones took the head: a short copy's
    # head and tail run side by side.
    t = head + 4 * nvec
    k = nranks - 1 - rank
    while k < words - t:
        dst[dst_word + t + k] = src[src_word + t + k]
        k += nranks
    rest = nbytes & 3
    if rest != 0 and nranks - 1 - rank == 3 % nranks:
        w = src[src_word + words]
        for b in range(rest):
            st_u8(dst, dst_word + words, b, w >> (8 * b))


# --- a copy split in two: loads first, stores later ------------------------------------
# A push loads its payload before its bookkeeping (reserving send-queue and staging space,
# writing the WQE: about 0.4 us on one thread), so that the loads' latency hides behind it
# and the stores can go as soon as the staging word is known. Each rank holds up to
# PRELOAD_VECTORS vectors: a payload of at most PRELOAD_VECTORS * 16 * nranks bytes.
PRELOAD_VECTORS = 4


@cuda.jit(device=True)
def preload_fits(nbytes, nranks):
    """Whether ``preload`` holds a payload of ``nbytes`` on ``nranks`` threads."""
    return nbytes <= PRELOAD_VECTORS * 16 * nranks


@cuda.jit(device=True, inline=True)
def _ld_part(src, s0, j, words, aligned):
    """Vector ``j`` of a payload of ``words`` words at ``s0``: whole, or its words that
    exist (the rest zeros; nothing past the payload is read)."""
    w = 4 * j
    if w + 4 <= words:
        return _ld16(src, s0 + w, aligned)
    z = uint32(0)
    return (src[s0 + w] if w < words else z, src[s0 + w + 1] if w + 1 < words else z,
            src[s0 + w + 2] if w + 2 < words else z, src[s0 + w + 3] if w + 3 < words else z)


@cuda.jit(device=True)
def load16_if(src, word, present):
    """16 bytes from ``src[word]`` (16-byte aligned) where ``present``, else zeros and no
    load: one predicated vector load."""
    if present:
        return ld_v4_u32(src, word)
    z = uint32(0)
    return (z, z, z, z)


@cuda.jit(device=True)
def load_words_if(src, word, nwords):
    """The four words from ``src[word]`` (any word), those at or past ``nwords`` zeros and
    not loaded: four predicated word loads, in flight together, for a source that is not
    16-byte aligned."""
    z = uint32(0)
    return (src[word] if nwords > 0 else z, src[word + 1] if nwords > 1 else z,
            src[word + 2] if nwords > 2 else z, src[word + 3] if nwords > 3 else z)


@cuda.jit(device=True)
def store16_if(dst, word, x, present):
    """Stores ``x`` (four words) at ``dst[word]`` (16-byte aligned) where ``present``."""
    if present:
        _st16(dst, word, x)


# Whole aligned vectors (every payload the benches and figures send) take straight-line
# code, one predicated vector access per share: the general code (per-word accesses where a
# vector is partial, byte stores of a last partial word) cost a push 0.4 to 0.8 us per
# message even where it moved nothing, on an H100: the first warp's 256 B 4.42 -> 3.74 us,
# 1 KiB 4.64 -> 3.81, the block path's 4 KiB 6.08 -> 5.31 (256 threads) and 6.37 -> 5.95
# (32 threads, which preload nothing of it) (BENCHMARKS.md, session 26).
@cuda.jit(device=True)
def preload(src, src_word, nbytes, rank, nranks):
    """This rank's share of a payload (``preload_fits``): vectors rank + k * nranks, for
    ``store_preloaded``. The loads are issued now and waited for at the first use."""
    aligned = (int64(address_of(src, src_word)) & 15) == 0
    if (nbytes & 15) == 0 and (aligned or nbytes == 0):
        nvec = nbytes >> 4
        return (load16_if(src, src_word + 4 * rank, rank < nvec),
                load16_if(src, src_word + 4 * (rank + nranks), rank + nranks < nvec),
                load16_if(src, src_word + 4 * (rank + 2 * nranks), rank + 2 * nranks < nvec),
                load16_if(src, src_word + 4 * (rank + 3 * nranks), rank + 3 * nranks < nvec))
    words = (nbytes + 3) >> 2
    return (_ld_part(src, src_word, rank, words, aligned),
            _ld_part(src, src_word, rank + nranks, words, aligned),
            _ld_part(src, src_word, rank + 2 * nranks, words, aligned),
            _ld_part(src, src_word, rank + 3 * nranks, words, aligned))


@cuda.jit(device=True, inline=True)
def _st_part(dst, d0, j, x, nbytes, aligned):
    """Stores vector ``j`` of a payload of ``nbytes`` at word ``d0``, byte-exact: whole
    where it is and the destination is 16-byte aligned, else word by word, the last
    partial word byte by byte."""
    w = 4 * j
    full = nbytes >> 2
    if w + 4 <= full and aligned:
        _st16(dst, d0 + w, x)
        return
    for k in range(4):
        if w + k < full:
            dst[d0 + w + k] = x[k]
        elif w + k == full:
            for b in range(nbytes & 3):
                st_u8(dst, d0 + w + k, b, x[k] >> (8 * b))


@cuda.jit(device=True)
def store_preloaded(dst, dst_word, x, nbytes, rank, nranks):
    """Stores what ``preload`` returned to ``dst`` at ``dst_word``; byte-exact like
    ``copy_bytes``. Every rank of the ``preload`` calls it with the same arguments."""
    aligned = (int64(address_of(dst, dst_word)) & 15) == 0
    if (nbytes & 15) == 0 and aligned:
        nvec = nbytes >> 4
        store16_if(dst, dst_word + 4 * rank, x[0], rank < nvec)
        store16_if(dst, dst_word + 4 * (rank + nranks), x[1], rank + nranks < nvec)
        store16_if(dst, dst_word + 4 * (rank + 2 * nranks), x[2], rank + 2 * nranks < nvec)
        store16_if(dst, dst_word + 4 * (rank + 3 * nranks), x[3], rank + 3 * nranks < nvec)
        return
    words = (nbytes + 3) >> 2
    # Written out, not looped: a register array indexed at run time would go to local memory.
    if 4 * rank < words:
        _st_part(dst, dst_word, rank, x[0], nbytes, aligned)
    if 4 * (rank + nranks) < words:
        _st_part(dst, dst_word, rank + nranks, x[1], nbytes, aligned)
    if 4 * (rank + 2 * nranks) < words:
        _st_part(dst, dst_word, rank + 2 * nranks, x[2], nbytes, aligned)
    if 4 * (rank + 3 * nranks) < words:
        _st_part(dst, dst_word, rank + 3 * nranks, x[3], nbytes, aligned)
