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
keep in flight.

Layout of one copy, in 4-byte words of the destination:

  head   0 to 3 words, until the destination is 16-byte aligned (one word per thread)
  body   16-byte stores; 16-byte loads where the source is then 16-byte aligned too, else
         four word loads per vector (the loads come from GPU memory, which serves them
         from the same cache lines); ``UNROLL`` vectors loaded per thread before any is
         stored
  tail   0 to 3 whole words, then the 1 to 3 bytes of a last partial word as byte stores

Every byte past ``nbytes`` at the destination keeps its value: a copy never writes a
byte it was not asked to, so two copies may end and begin inside one word.
"""
from __future__ import annotations

from numba import int64

from gpuwrite.cudaenv import cuda
from gpuwrite.device.intrinsics import address_of, ld_v4_u32, st_u8, st_v4_u32

# Vectors each thread loads before it stores any. Four moved one H100 block at 41.8 GB/s
# (256 threads), the bulk-store ceiling; four more per thread cost registers for little.
UNROLL = 4


@cuda.jit(device=True, inline=True)
def _ld16(src, word, aligned):
    """Four words from ``src[word]``: one 16-byte load where ``aligned``, else four."""
    if aligned:
        return ld_v4_u32(src, word)
    return (src[word], src[word + 1], src[word + 2], src[word + 3])


@cuda.jit(device=True, inline=True)
def _st16(dst, word, x):
    st_v4_u32(dst, word, x[0], x[1], x[2], x[3])


@cuda.jit(device=True)
def _copy_vectors(dst, d0, src, s0, nvec, rank, nranks, aligned):
    """Copies ``nvec`` 16-byte vectors from word ``s0`` to word ``d0`` (16-byte aligned)."""
    j = rank
    step = nranks
    # UNROLL loads in flight per thread; the stores follow. Vectors of one round are
    # ``nranks`` apart, so a warp's accesses stay contiguous (coalesced) in each.
    while j + 3 * step < nvec:
        a = _ld16(src, s0 + 4 * j, aligned)
        b = _ld16(src, s0 + 4 * (j + step), aligned)
        c = _ld16(src, s0 + 4 * (j + 2 * step), aligned)
        e = _ld16(src, s0 + 4 * (j + 3 * step), aligned)
        _st16(dst, d0 + 4 * j, a)
        _st16(dst, d0 + 4 * (j + step), b)
        _st16(dst, d0 + 4 * (j + 2 * step), c)
        _st16(dst, d0 + 4 * (j + 3 * step), e)
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
