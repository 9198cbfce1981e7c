"""``gpuwrite bench``: the floor, the ceilings and every path, measured in one run.

Targets (issues: foundation, 14), each a ratio against something measured in the same
run, and each judged on every run, not only on the median:
  * gpu_push 64-byte latency, post to completion seen by the kernel <= 1.10 x floor,
    where the floor is a bare GPU-to-host doorbell ping-pong through mapped memory that
    polls at once, each repeat's the median of FLOOR_SAMPLES of them (since session 41,
    as the sweep's; every one is kept, ``floor_samples_us``). A table of such messages
    runs on send_messages' kernel for one-thread messages, whose other threads leave at
    once, since session 40, as do the sweep's points up to 256 B (``kernels.kernel_scope``;
    every latency, bandwidth, rate and sweep entry says which kernel ran, ``kernel``, since
    session 41); gpu_push pauses DEFAULT_POLL_DELAY_NS (300 ns) before its first completion
    poll, as every QueueSet does unless told; both are also measured with other pauses
    (gpu_push with none too), and ``latency_best_pause_each_ratio`` compares each side at
    its best;
  * gpu_push bandwidth for >= 1 MiB messages >= 0.90 x bulk GPU-store-to-host bandwidth
    (the highest of BULK_STORE_SAMPLES measurements; a path that beats it by more than
    CEILING_SLACK is named, ``bulk_store_below_paths``: that ceiling ran slow);
  * >= 20 million 64-byte messages per second, many blocks posting, doorbells batched;
  * nic_pull and host_staged measured beside gpu_push;
  * latency vs size (``sweep``): every path, one message in flight, 32 and 256 threads per
    block, messages in WQEs of at most 256 KiB (``sweep_wqe_bytes``), against floor +
    size / ceiling (the bulk-store ceiling; for gpu_push and host_staged with 32 threads
    the bandwidth of one warp's vector copy of a source read for the first time, as every
    message's payload is, from HBM (``warp_copy_hbm_gbytes``: evicted from
    L2 first; the same copy just after its upload, ``warp_copy_fresh_gbytes``, and from
    L2, ``warp_copy_gbytes``, are reported beside it; each ceiling the highest of its
    measurements, ``sweep_ceilings``, and a gpu_push run that beats its bound is not
    judged, ``beats_bound``); host_staged's data crosses PCIe
    twice, so it adds size / the bulk-store ceiling for the NIC's read of its bounce
    buffer): gpu_push and host_staged <= 1.25x at every size; nic_pull
    (the GPU pull agent) <= 2x at 64 B and <= 1.5x at 64 KiB. A nic_pull in emulated mode
    makes two round trips between GPU and host, the sender's doorbell and completion (the
    floor) and the engine's request to the agent and its answer (the reverse floor: the
    host pings a GPU warp, ``reverse_floor_us``; ``floor_reverse_64B_us`` with 64 bytes
    copied and fenced before each answer, as the agent must): each nic_pull point also
    reports ``least_us``, floor + the 64-byte reverse trip + the rest of its bytes /
    ceiling, and whether its target lies below it (``target_below_least``: no stand-in
    that keeps the host playing the NIC can meet it). gpu_push and host_staged points with
    BLOCK_COPY_THREADS threads report theirs too (``least_push_us``): the sweep posts each
    message from one block, whose copy into host memory cannot go faster than that block's
    vector copy of a first-read source (``block256_copy_hbm_gbytes``, measured in the
    same run), while the bound divides by the whole GPU's bulk stores. gpu_push and
    host_staged points of one WQE (to 64 KiB) with either block also have a measured least
    (``least_push_stores_us``, before each repeat): the floor's ping-pong after the stores
    such a message makes visible before its doorbell (gpu_push's with its staging header,
    host_staged's without), by the threads and with the barrier its kernel uses, its
    payload from registers; a point's least is the larger of the fastest of those and the
    block's copy (``least_kind``).
The floor polls its answer with one read of host memory at a time, as gpuwrite's waits do
(they after a first-poll pause, the floor at once); beside it, ``floor_readers``
(``floor_readers_us``): the same ping-pong answered to FLOOR_READERS warps polling lines of
their own, staggered, which finds the answer up to a read round trip sooner than the floor.
That is no share of a wait: lanes polling the one CQE word found a completion no sooner
than a wait's one paused reader (BENCHMARKS.md, session 39).
The 64-byte latency target has a least too (``least_push_64B_us``): the floor's
ping-pong with the stores a 64-byte push must make visible before its doorbell (payload
read from GPU memory, staging header and payload, WQE) ahead of each ping's release
store; where its ratio to the floor exceeds the target in every repeat, the target lies
below what any push that keeps the verbs' ordering can do on that machine
(``targets_below_least``).
Every repeated figure is reported as min, median and max. Where a run misses a target,
``lost_in`` names the step that took the time: the engine (doorbell seen to CQE written,
its mean turnaround) or the GPU side (the rest of the round trip), whichever exceeds its
share of the bound more (the engine's share: its least turnaround for that path; for
nic_pull, gpu_push's, and the rest of its turnaround is its read, which the bound has no
share for: ``agent``, the engine's round trip to the pull agent (request written to answer
seen, counter ``pull_agent_ns``), and ``pull``, the rest of it; for a gpu_push or
host_staged point with a measured least, ``stores``, the least less the floor, against what
the bound allows for moving its bytes: ``sweep_steps``; for the 64-byte latency, the floor
of the same repeat is the GPU side's share, and the push breakdown of that repeat is kept
beside it); for bandwidth and rate, against the median run. A sweep point's runs slower than its
fastest by about a whole completion-poll read (``poll_read_us``: the floor's rise when the
host answers late) are listed as ``runs_a_poll_read_later``: their completions were found a
read later, which is the poll's phase, not the path's work; those slower than it by a fifth
or more, at least half of it in the engine's turnaround, as ``runs_engine_slow``
(``engine_slow_runs``). Every rate run also keeps the engine's side
(``rate_engine_side``: its turnaround and how many doorbell rings it saw in one look), which
is where the slow runs of session 18 lost their time. Every run of a repeated figure and of
the sweep also keeps what the host did meanwhile (``host``: steal time and this process's
involuntary context switches, ``gpuwrite.bench.hostload``); a sweep point names its slow
runs during which the host took CPU time from the engine (``runs_host_busy``), and each
sweep run the engine's split copies (``copy``: the worker's wait on its copy helpers and
the share of their pieces it copied itself, ``copy_split_side``).
"""
from __future__ import annotations

import numpy as np
from numba import int32, int64

from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device import verbs as dv
from gpuwrite.device.intrinsics import (fence_sys, globaltimer_ns, ld_acquire_sys_u32,
                                        st_relaxed_sys_u32, st_relaxed_sys_u64,
                                        st_release_sys_u32, st_v4_u32, warp_sync)
from gpuwrite.bench import gpustate, hostload
from gpuwrite.bench.breakdown import push_breakdown
from gpuwrite.device.copy import copy_bytes
from gpuwrite.host.memory import evict_l2, mapped
from gpuwrite.host.verbs import (DEFAULT_POLL_DELAY_NS, default_cached_dst_max_bytes,
                                 default_copy_threads, process_cpus)
from gpuwrite.kernel_cache import cached
from gpuwrite.paths import kernels as K, runner

TARGET_LATENCY_RATIO = 1.10
TARGET_BANDWIDTH_RATIO = 0.90
TARGET_RATE_MPPS = 20.0
TARGET_SWEEP_RATIO = 1.25
TARGET_PULL_64B_RATIO = 2.0
TARGET_PULL_64K_RATIO = 1.5
BANDWIDTH_REPEATS = 5
LATENCY_REPEATS = 5
RATE_REPEATS = 5
SWEEP_REPEATS = 5
SWEEP_SIZES = (64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20)
SWEEP_PATHS = ("gpu_push", "host_staged", "nic_pull", "gpu_push_inline")
# The paths whose payload the GPU writes into host-visible memory (the staging ring, the
# bounce ring) before the doorbell, by one thread, the first warp or the block by size.
PUSHED_PATHS = ("gpu_push", "host_staged")
SWEEP_THREADS = (32, 256)
SWEEP_ITERS = 400
# How each path sends its 1 MiB messages: 128 QPs (one block each) keep enough stores in
# flight to fill PCIe; 12 engine threads deliver. The paths that copy through NIC or
# bounce memory post a message as WQEs of BW_CHUNK_BYTES, with room for BW_CHUNKS_IN_FLIGHT
# of them per QP (68 MiB of staging over 128 QPs, in the host's 300 MiB L3), so that an
# engine thread that falls behind for a while does not stall the GPU; nic_pull posts one
# WQE per message, as a NIC reading GPU memory needs no staging. Whole 1 MiB WQEs through
# a 4 MiB ring per QP (512 MiB, past the L3) reached 0.72 to 0.87x. 64 KiB WQEs reached
# 0.94 to 0.99x in probes; inside the bench, 0.85 to 0.99x with four in flight and 0.98 to
# 0.99x with eight (BENCHMARKS.md, session 5).
BW_CHUNK_BYTES = 64 << 10
BW_CHUNKS_IN_FLIGHT = 8
# CPUs the bench leaves to all but the engine's workers: the host thread (it spins in its
# stream wait), the GPU driver's threads and the OS. Each worker busy-polls its QPs, and a
# run lasts as long as its slowest QP: with 14 workers on a 16-CPU H100 host the 64-byte
# rate dipped to 53 to 64 M/s in 3 of 12 runs, with 12 it stayed at 67 to 72 in 8 of 8
# (BENCHMARKS.md, session 17). Sharing a CPU is not the whole story: with 12 workers each
# pinned to a CPU of its own, runs still dipped, every worker at once (session 18).
HOST_CPUS = 4


def engine_workers(wanted: int, ncpus: int | None = None) -> int:
    """``wanted`` engine workers, or fewer where this process's CPUs (or ``ncpus``), less
    HOST_CPUS, cannot give each one a CPU of its own (at least one)."""
    return max(1, min(wanted, (len(process_cpus()) if ncpus is None else ncpus) - HOST_CPUS))


RATE_WORKERS = engine_workers(14)
RATE_BATCH = 16            # messages per doorbell in the rate runs
_BW_COMMON = dict(n_qps=128, batch=4, block_threads=512, workers=engine_workers(12))
BANDWIDTH_RUN = {
    "gpu_push": dict(_BW_COMMON, chunk_bytes=BW_CHUNK_BYTES, stage_slot_bytes=4096,
                     stage_slots=BW_CHUNKS_IN_FLIGHT * (BW_CHUNK_BYTES // 4096 + 1)),
    "host_staged": dict(_BW_COMMON, chunk_bytes=BW_CHUNK_BYTES,
                        bounce_bytes=BW_CHUNKS_IN_FLIGHT * BW_CHUNK_BYTES),
    "nic_pull": dict(_BW_COMMON, chunk_bytes=1 << 20),
}
# Pauses before the first poll (ns) with which the floor and gpu_push are also measured.
POLL_DELAYS_NS = (100, 200, 300, 400, 600)
# Delays (ns) with which the floor's host thread answers: a NIC that takes that long from
# doorbell to completion. The GPU's completion poll is a chain of PCIe reads, one round
# trip (about 1.2 us on an H100) each, so the round trip grows in steps of one read, not
# smoothly: the staircase says how much NIC-side time the floor's poll phase absorbs.
ANSWER_DELAYS_NS = (0, 100, 200, 300, 400, 500, 600, 800, 1000, 1200)


@cuda.jit(device=True, inline="always")
def _await_pong(pong, k, t0, timeout_ns, out_ns):
    """Polls ``pong`` until the host has answered ping k + 1 (sent at ``t0``) and stamps
    ``out_ns[k]`` with the round trip, or with -1 once ``timeout_ns`` have passed; returns
    whether the answer came. The one wait of every ping-pong kernel below (inlined, so that
    each keeps the loop it had: a floor is only as good as its poll)."""
    while ld_acquire_sys_u32(pong, 0) != k + 1:
        if globaltimer_ns() - t0 > timeout_ns:
            out_ns[k] = -1
            return False
    out_ns[k] = globaltimer_ns() - t0
    return True


@cached
@cuda.jit
def _pingpong(ping, pong, iters, out_ns, timeout_ns, poll_delay_ns):
    if cuda.threadIdx.x != 0 or cuda.blockIdx.x != 0:
        return
    for k in range(iters):
        t0 = globaltimer_ns()
        st_release_sys_u32(ping, 0, k + 1)
        while globaltimer_ns() - t0 < poll_delay_ns:
            pass
        if not _await_pong(pong, k, t0, timeout_ns, out_ns):
            return


# The floor with several readers (``floor_readers_us``): FLOOR_READERS warps each poll the
# answer on a line of its own (the host responder stores it into every line), warp w's
# first read FLOOR_READER_SPACING_NS x w after the ping. One reader's next read leaves only
# when the last returns, so an answer that lands just after a read sampled host memory
# waits most of a read round trip (about 1.15 us on an H200) for the next: the floor stays
# flat while the host answers up to 0.8 us late (``floor_by_answer_delay_us``). On an H200
# four warps 290 ns apart took the round trip from 2.91 to 2.94 us to 1.89 in five rounds
# of five; eight warps 145 ns apart 1.86 to 2.02; four lanes of one warp 2.30 to 2.34; four
# warps reading one word 2.59 to 2.66, and four lanes of one warp reading one word 2.24 to
# 2.27 against 3.01 to 3.07 on another host. That is no gain a wait can have: with the
# engine answering, three lanes of the waiting warp polling the CQE word (handing it to
# lane 0) found a 64-byte completion no sooner than one reader polling at once, and 0.8 us
# later than one reader after the first-poll pause the waits take (I_POLL_DELAY_NS):
# watched waits were built and reverted (BENCHMARKS.md, session 39).
# One thread keeping several relaxed reads in flight, each on a line of its own, was
# slower than one read at a time (3.3 to 4.0 us against 2.7 to 3.1 on two hosts; of one
# word, 5.6 to 10.3: those reads wait for each other) (benchmarks/scripts/
# poll_window_probe.cu, BENCHMARKS.md, session 38).
FLOOR_READERS = 4
FLOOR_READER_SPACING_NS = 290
_PONG_LINE_WORDS = lib.GW_PONG_LINE_WORDS     # a constant the kernel can hold


@cached
@cuda.jit
def _pingpong_readers(ping, pong, iters, out_ns, timeout_ns, spacing_ns):
    tid = cuda.threadIdx.x
    warp = tid // 32
    seen = cuda.shared.array(1, int64)      # the last ping answered (k + 1)
    t0s = cuda.shared.array(1, int64)
    stop = cuda.shared.array(1, int32)
    if tid == 0:
        seen[0] = 0
        stop[0] = 0
    for k in range(iters):
        if tid == 0:
            t0s[0] = globaltimer_ns()
        cuda.syncthreads()
        t0 = t0s[0]
        if tid == 0:
            st_release_sys_u32(ping, 0, k + 1)
        if tid % 32 == 0:
            while globaltimer_ns() - t0 < warp * spacing_ns:
                pass
            # Shared words through atomics: a plain load in a loop is hoisted out of it.
            while cuda.atomic.add(seen, 0, 0) <= k:
                if ld_acquire_sys_u32(pong, warp * _PONG_LINE_WORDS) == k + 1:
                    if cuda.atomic.max(seen, 0, k + 1) <= k:      # the first to see it
                        out_ns[k] = globaltimer_ns() - t0
                    break
                if globaltimer_ns() - t0 > timeout_ns:
                    out_ns[k] = -1
                    cuda.atomic.max(stop, 0, 1)
                    break
        cuda.syncthreads()
        if stop[0] != 0:
            return


# The stores a 64-byte push makes visible before its doorbell, in the lines and the order
# ``push_small`` and ``ring_doorbell`` write them: a 128-byte staging line holding the
# 16-byte header and the payload (five 16-byte stores), one 64-byte WQE in the send queue
# (four), then the doorbell record (a system-scope release store) and the 8-byte doorbell
# register. Rings of LEAST_LINES lines, so consecutive messages write new lines, as they
# do in a staging ring and a send queue.
LEAST_LINES = 64


@cuda.jit(device=True)
def _least_wqe(sq, w, k, nbytes, stage_word):
    """Message ``k``'s 64-byte WQE at word ``w`` of ``sq`` (four 16-byte stores), for a
    payload of ``nbytes`` at ``stage_word``, as the least ping-pongs write it."""
    st_v4_u32(sq, w, k, 3, 8, 0)
    st_v4_u32(sq, w + 4, 0, k, 7, 0)
    st_v4_u32(sq, w + 8, nbytes, 7, 0, stage_word)
    st_v4_u32(sq, w + 12, 0, 0, 0, 0)


@cached
@cuda.jit
def _pingpong_after_push_writes(ping, pong, uar, stage, sq, src, iters, out_ns, timeout_ns):
    if cuda.threadIdx.x != 0 or cuda.blockIdx.x != 0:
        return
    for k in range(iters):
        t0 = globaltimer_ns()
        line = k % LEAST_LINES
        payload = dv._load64(src, line * 16, 4)
        h = line * 32
        st_v4_u32(stage, h, k, 64, 1, k & 0xFFFF)
        dv._store64(stage, h + 4, payload, 4)
        _least_wqe(sq, line * 16, k, 64, h)
        st_release_sys_u32(ping, 0, k + 1)
        st_relaxed_sys_u64(uar, 0, k)
        if not _await_pong(pong, k, t0, timeout_ns, out_ns):
            return


# The sweep's gpu_push and host_staged points of one WQE (at most K.RING_EACH_BYTES) have
# a measured least too: the floor's ping-pong after the stores such a message must make
# visible before its doorbell, made by the threads the kernel makes them with and ordered
# by the barrier it takes (``push_lanes``): thread 0's 64-byte WQE and, for gpu_push, its
# 16-byte staging header, and the payload's 16-byte stores, into a ring whose messages
# each take new lines.
# The payload's values come from registers: no source is read (the copy's rate is the
# other least, ``least_push_us``), so every push of that size by that block pays at least
# this much with a NIC that answers at once and no bookkeeping.
LEAST_STAGE_BYTES = 1 << 20


@cached
@cuda.jit
def _pingpong_after_push_stores(ping, pong, uar, stage, sq, iters, out_ns, timeout_ns,
                                nbytes, lanes, header):
    tid = cuda.threadIdx.x
    stop = cuda.shared.array(1, int32)
    vec_words = dv.vector_words(nbytes)
    lead = 4 if header else 0
    slot_words = (lead + vec_words + 31) & ~31     # header and payload, whole 128-byte lines
    slots = stage.shape[0] // slot_words
    if tid == 0:
        stop[0] = 0
    for k in range(iters):
        cuda.syncthreads()      # the last round trip is over; nothing of it is in this one
        if stop[0] != 0:
            return
        t0 = globaltimer_ns()
        base = (k % slots) * slot_words
        if tid == 0:
            if header:
                st_v4_u32(stage, base, k, nbytes, 1, k & 0xFFFF)
            _least_wqe(sq, (k % LEAST_LINES) * 16, k, nbytes, base)
        v = 4 * tid
        while tid < lanes and v < vec_words:
            st_v4_u32(stage, base + lead + v, k, v, k, v)
            v += 4 * lanes
        if lanes > 1:
            if SIMULATOR or lanes == cuda.blockDim.x:
                cuda.syncthreads()
            elif tid < 32:
                warp_sync(lanes)
        if tid == 0:
            st_release_sys_u32(ping, 0, k + 1)
            st_relaxed_sys_u64(uar, 0, k)
            if not _await_pong(pong, k, t0, timeout_ns, out_ns):
                stop[0] = 1


@cached
@cuda.jit
def _gpu_pong(ping, pong, iters, timeout_ns, answered, data, src, nbytes):
    """The GPU side of the reverse floor, launched as one block of one warp: it answers
    each new ``ping`` (k + 1) by storing it to ``pong``, as the pull agent answers a
    request; with ``nbytes`` > 0 it first copies that many bytes from ``src`` (GPU memory)
    to ``data`` (mapped host memory) and publishes them as the agent does (a barrier, a
    system-scope fence, the answer). Lane 0 polls and tells the others through shared
    memory (the simulator has no shuffle); it leaves after ``iters`` answers or
    ``timeout_ns`` without a ping."""
    lane = cuda.threadIdx.x
    seen = cuda.shared.array(1, int32)
    t0 = globaltimer_ns()
    for k in range(iters):
        if lane == 0:
            seen[0] = 1
            while ld_acquire_sys_u32(ping, 0) != k + 1:
                if globaltimer_ns() - t0 > timeout_ns:
                    seen[0] = 0
                    break
        cuda.syncthreads()
        if seen[0] == 0:
            if lane == 0:
                answered[0] = k
            return
        if nbytes > 0:
            copy_bytes(data, 0, src, 0, nbytes, lane, cuda.blockDim.x)
        cuda.syncthreads()      # every lane has read seen[0] and stored its bytes
        if lane == 0:
            if nbytes > 0:
                fence_sys()
                st_relaxed_sys_u32(pong, 0, k + 1)
            else:
                st_release_sys_u32(pong, 0, k + 1)
        t0 = globaltimer_ns()
    if lane == 0:
        answered[0] = iters


@cached
@cuda.jit
def _bulk_store(dst, reps):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for r in range(reps):
        k = start
        while k < dst.shape[0]:
            dst[k] = k + r
            k += stride


@cached
@cuda.jit
def _block_copy(dst, src, nbytes, reps, stride_words):
    # Copy k reads the source from word k * stride_words: 0 copies one range again and
    # again (from L2 after the first), nbytes / 4 reads a new range each time.
    for k in range(reps):
        copy_bytes(dst, 0, src, k * stride_words, nbytes, cuda.threadIdx.x, cuda.blockDim.x)
        cuda.syncthreads()


def block_copy_gbytes(threads: int, nbytes: int = 1 << 20, reps: int = 20,
                      fresh: bool = False, evict: bool = False) -> float:
    """One block of ``threads`` copying GPU memory into mapped host memory with
    ``copy_bytes`` (the ceiling of a path whose copy is one such block), GB/s; one launch
    of ``reps`` copies, so the launch is amortised. ``fresh``: each copy reads bytes no
    kernel has read since they were copied to the GPU, as every message of a run does
    (its payload is uploaded once, and each message's range is read once); else one
    range, again and again, from L2. ``evict`` (with ``fresh``): L2 is written over just
    before the timed launch (``evict_l2``), so that every copy reads HBM; without
    it the upload may leave part of the source in L2 (one warp: 8 GB/s from HBM, 9 to 13
    just after the upload, 16 from L2; BENCHMARKS.md, session 30)."""
    dst = mapped((nbytes // 4,), np.uint32)
    ranges = reps + 1 if fresh else 1
    src = cuda.to_device(np.arange(ranges * (nbytes // 4), dtype=np.uint32))
    stride = nbytes // 4 if fresh else 0
    _block_copy[1, threads](dst.kernel, src[(ranges - 1) * stride:], nbytes, 1, 0)
    if fresh and evict:
        evict_l2()
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    start.record()
    _block_copy[1, threads](dst.kernel, src, nbytes, reps, stride)
    end.record()
    end.synchronize()
    return reps * nbytes / (cuda.event_elapsed_time(start, end) * 1e-3) / 1e9


def spread(values) -> dict:
    """min, median and max of a repeated figure, and every value."""
    v = [float(x) for x in values]
    return {"min": min(v), "median": float(np.median(v)), "max": max(v), "runs": v}


def _mean_us(counters: dict, ns_key: str, count_key: str) -> float | None:
    """An engine counter summed in ns over the events another counts, as a mean in us;
    None where it counted none (or, for a file or fake, has no such counter)."""
    n = counters.get(count_key, 0)
    return counters[ns_key] / n / 1e3 if n else None


def mean_turnaround_us(counters: dict) -> float | None:
    """The engine's mean turnaround (doorbell seen to CQE written) over a run's completions,
    from its counters; None where it wrote none."""
    return _mean_us(counters, "turnaround_ns", "turnarounds")


def agent_wait_us(counters) -> float | None:
    """A run's mean round trip from the engine to the pull agent (request written to answer
    seen: ``pull_agent_ns`` over ``pull_agent_answers``), us; None where the agent answered
    no pull."""
    return _mean_us(counters, "pull_agent_ns", "pull_agent_answers")


def engine_split_us(r) -> dict:
    """A run's round trip split into the engine's share (doorbell seen to CQE written, mean
    over its completions) and the GPU side (the rest of the p50)."""
    engine = mean_turnaround_us(r.counters) or 0.0
    return {"engine": engine, "gpu": r.latency_p50_us - engine}


def message_rate_mpps(r) -> float:
    """A run's delivered messages per second, in millions, over the span its throughput
    was measured on (first post to last completion); 0 where nothing was delivered."""
    if not r.throughput_gbps:
        return 0.0
    span_s = r.bytes * 8 / (r.throughput_gbps * 1e9)
    return r.delivered / span_s / 1e6


def hbm_copy_ceilings() -> dict:
    """The sweep's one-block ceilings: one warp's and one BLOCK_COPY_THREADS block's copy
    of a first-read source evicted from L2 first (``block_copy_gbytes(evict=True)``)."""
    return {"warp_copy_hbm_gbytes": block_copy_gbytes(32, fresh=True, evict=True),
            "block256_copy_hbm_gbytes": block_copy_gbytes(BLOCK_COPY_THREADS, fresh=True,
                                                          evict=True)}


def copy_split_side(r) -> dict | None:
    """How a run's split deliveries (those the engine's copy helpers shared) went, from
    its counters: ``splits``, the share of pieces handed to helpers that the worker copied
    itself because their helper had not claimed them yet (``late_share``), and the
    worker's mean wait per split delivery, its own piece done to every piece done
    (``wait_us``). None where nothing was split (or the counters predate session 30)."""
    c = r.counters
    n = c.get("copies_split", 0)
    if not n or "copy_pieces" not in c:
        return None
    return {"splits": int(n), "late_share": c["copy_pieces_late"] / max(c["copy_pieces"], 1),
            "wait_us": c["copy_wait_ns"] / n / 1e3}


def rate_engine_side(runs, rings: int) -> dict:
    """The engine's side of each rate run: its mean turnaround (doorbell seen to CQE
    written, us) and how many of the GPU's ``rings`` doorbells it saw in one look, on
    average. An engine that keeps up sees each ring on its own (1 ring a look, or close);
    one whose passes over its QPs slow down sees two or more, and its turnaround grows:
    five of the seven slow rate runs of one session-18 process had 2.0 rings a look and up
    to twice the turnaround, with no CQ-full stall (BENCHMARKS.md)."""
    return {"turnaround_us": spread([engine_split_us(r)["engine"] for r in runs]),
            "rings_per_look": spread([rings / max(r.counters["doorbells"], 1) for r in runs]),
            "cq_full_stalls": [int(r.counters["cq_full_stalls"]) for r in runs]}


def lost_in(run_steps: dict, reference_steps: dict) -> dict:
    """The step of a run that missed, against a reference (the median run): the one that
    grew most, and by how much."""
    grew = {k: run_steps[k] - reference_steps.get(k, 0.0) for k in run_steps}
    worst = max(grew, key=grew.get)
    return {"step": worst, "grew_by": grew[worst], "steps": run_steps}


def _p50_after_start_us(ns) -> float:
    """Median of a ping-pong's round trips (ns), in us, without its first tenth (the
    kernel's start and the first polls)."""
    return float(np.median(ns[len(ns) // 10:]) / 1e3)


def answered_pingpong_ns(iters: int, launch, answer_delay_ns: int = 0,
                         lines: int = 1) -> np.ndarray:
    """Runs ``launch(ping, pong, out)`` (a ping-pong kernel writing each round trip's ns
    into ``out``, -1 where no answer came) against the host C thread that answers each
    ping ``answer_delay_ns`` after it sees it, into ``lines`` words of ``pong``
    _PONG_LINE_WORDS apart; every round trip, ns."""
    ping = mapped((16,), np.uint32)
    pong = mapped((max(16, lines * _PONG_LINE_WORDS),), np.uint32)
    out = cuda.to_device(np.zeros(iters, dtype=np.int64))
    responder = lib.gw_pong_start(ffi.cast("void *", ping.address),
                                  ffi.cast("void *", pong.address), answer_delay_ns, lines)
    if responder == ffi.NULL:
        raise RuntimeError(f"the ping-pong responder did not start (lines={lines}: allowed 1 "
                           f"to {lib.GW_PONG_MAX_LINES})")
    try:
        launch(ping, pong, out)
        cuda.synchronize()
    finally:
        lib.gw_pong_stop(responder)
    ns = out.copy_to_host()
    if (ns < 0).any():
        raise RuntimeError("the ping-pong responder did not answer within 2 s")
    return ns


def _answered_pingpong_us(iters: int, launch, answer_delay_ns: int = 0, lines: int = 1) -> float:
    """The median round trip of ``answered_pingpong_ns``, in us."""
    return _p50_after_start_us(answered_pingpong_ns(iters, launch, answer_delay_ns, lines))


# A rise of the floor answered late smaller than this is not a whole poll read.
POLL_READ_MIN_US = 0.5


def floor_pingpong_us(iters: int, poll_delay_ns: int = 0, answer_delay_ns: int = 0) -> float:
    """Median round trip of a bare doorbell ping-pong between GPU and a host C thread;
    ``poll_delay_ns`` after its store, the GPU starts polling for the answer; the host
    thread answers ``answer_delay_ns`` after it sees the doorbell."""
    return _answered_pingpong_us(iters, lambda ping, pong, out: _pingpong[1, 32](
        ping.kernel, pong.kernel, iters, out, 2_000_000_000, poll_delay_ns), answer_delay_ns)


def floor_readers_us(iters: int, readers: int = FLOOR_READERS,
                     spacing_ns: int = FLOOR_READER_SPACING_NS) -> float:
    """Median round trip of the floor's ping-pong answered to ``readers`` warps at once, each
    polling a line of its own, warp w from ``spacing_ns`` x w after the ping
    (``_pingpong_readers``): how much sooner than the floor's one reader, polling at once,
    readers on lines of their own find the answer. gpuwrite's waits poll with one reader
    after a first-poll pause; the targets are judged against the floor."""
    if not 1 <= readers <= lib.GW_PONG_MAX_LINES:
        raise ValueError(f"readers={readers}: allowed 1 to {lib.GW_PONG_MAX_LINES}")
    return _answered_pingpong_us(iters, lambda ping, pong, out: _pingpong_readers[
        1, 32 * readers](ping.kernel, pong.kernel, iters, out, 2_000_000_000, spacing_ns),
        lines=readers)


# Ping-pongs behind each floor the sweep's bounds use (at the start, before each repeat).
FLOOR_SAMPLES = 3


def floor_samples_us(iters: int) -> list[float]:
    """FLOOR_SAMPLES ``floor_pingpong_us(iters)``, in the order taken."""
    return [floor_pingpong_us(iters) for _ in range(FLOOR_SAMPLES)]


def floor_median_us(iters: int) -> float:
    """The median of ``floor_samples_us(iters)``: the floor behind the sweep's bounds,
    measured at the bench's start and again before each sweep repeat, and (since session
    41) each 64-byte latency repeat's."""
    return float(np.median(floor_samples_us(iters)))


def least_push_64B_us(iters: int) -> float:
    """Median round trip of the floor's ping-pong when each ping is preceded by the stores
    a 64-byte gpu_push must make visible before its doorbell (``_pingpong_after_push_writes``:
    payload loaded from GPU memory, staging header and payload, WQE, doorbell record with
    the same release store, doorbell register), answered by the same bare host thread.
    The least any push that keeps the verbs' ordering can take, with a NIC that answers
    at once and no bookkeeping: what the release store waits for (the earlier writes to
    reach host memory) is the part of a push's latency the floor has no share for."""
    uar = mapped((8,), np.uint64)
    stage = mapped((LEAST_LINES * 32,), np.uint32)
    sq = mapped((LEAST_LINES * 16,), np.uint32)
    src = cuda.to_device(np.arange(LEAST_LINES * 16, dtype=np.uint32))
    return _answered_pingpong_us(iters, lambda ping, pong, out: _pingpong_after_push_writes[1, 32](
        ping.kernel, pong.kernel, uar.kernel, stage.kernel, sq.kernel, src, iters, out,
        2_000_000_000))


def push_lanes(size: int, threads: int) -> int:
    """The threads with which gpu_push's and host_staged's kernels store a ``size``-byte
    payload of whole aligned vectors from a block of ``threads``: one up to
    dv.MID_PUSH_BYTES (no barrier),
    the first warp up to K.WARP_PUSH_BYTES (a warp barrier; on the simulator only where the
    block is one warp, as there), the block beyond (a block barrier)."""
    if size <= dv.MID_PUSH_BYTES:
        return 1
    if size <= K.WARP_PUSH_BYTES and (K.WARP_PATH_ANY_BLOCK or threads <= 32):
        return min(32, threads)
    return threads


def least_push_stores_us(size: int, threads: int, iters: int, path: str = "gpu_push") -> float:
    """Median round trip of ``_pingpong_after_push_stores``: the floor's ping-pong after
    the stores a gpu_push (or host_staged, which writes no staging header) message of
    ``size`` bytes (one WQE) from a block of ``threads`` makes visible before its doorbell,
    by the threads and barrier its kernel uses (``push_lanes``), answered by the floor's
    bare host thread."""
    if path not in PUSHED_PATHS:
        raise ValueError(f"path={path!r}: a least of stores is measured for {PUSHED_PATHS}")
    uar = mapped((8,), np.uint64)
    stage = mapped((max(LEAST_STAGE_BYTES, 2 * (size + 128)) // 4,), np.uint32)
    sq = mapped((LEAST_LINES * 16,), np.uint32)
    lanes = push_lanes(size, threads)
    return _answered_pingpong_us(iters, lambda ping, pong, out: _pingpong_after_push_stores[
        1, threads](ping.kernel, pong.kernel, uar.kernel, stage.kernel, sq.kernel, iters, out,
                    2_000_000_000, size, lanes, int(path == "gpu_push")))


def reverse_floor_us(iters: int, payload_bytes: int = 0,
                     timeout_ns: int = 2_000_000_000) -> float:
    """Median round trip of the reverse ping-pong: a host C thread stores to a mapped host
    word, a GPU warp polling it answers into another (``_gpu_pong``), the host thread sees
    the answer. Bare, the least time in which the engine, a host thread, hears back from
    the GPU; with ``payload_bytes``, the least in which the pull agent can answer a pull
    of that many bytes (copied and fenced before the answer, as the agent does). The first
    tenth of the round trips (the kernel's start among them) is dropped."""
    ping = mapped((16,), np.uint32)
    pong = mapped((16,), np.uint32)
    words = max(1, -(-payload_bytes // 4))
    data = mapped((words,), np.uint32)
    src = cuda.to_device(np.arange(words, dtype=np.uint32))
    answered = cuda.to_device(np.zeros(1, dtype=np.int64))
    rtt = ffi.new("uint64_t[]", iters)
    _gpu_pong[1, 32](ping.kernel, pong.kernel, iters, timeout_ns, answered, data.kernel, src,
                     payload_bytes)
    # The launch returns at once; cffi lets go of the GIL while the host thread pings.
    done = lib.gw_ping_run(ffi.cast("void *", ping.address), ffi.cast("void *", pong.address),
                           iters, timeout_ns, rtt)
    cuda.synchronize()
    if done < iters:
        raise RuntimeError(f"the GPU warp answered {done} of {iters} pings; the next took "
                           f"more than {timeout_ns / 1e9:g} s")
    return _p50_after_start_us(np.frombuffer(ffi.buffer(rtt), dtype=np.uint64))


def bulk_store_gbytes(nbytes: int) -> float:
    """Full-grid GPU stores into mapped host memory, GB/s (the push ceiling)."""
    dst = mapped((nbytes // 4,), np.uint32)
    blocks = 4 * cuda.get_current_device().MULTIPROCESSOR_COUNT
    _bulk_store[blocks, 512](dst.kernel, 1)
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    start.record()
    _bulk_store[blocks, 512](dst.kernel, 3)
    end.record()
    end.synchronize()
    ms = cuda.event_elapsed_time(start, end)
    return 3 * nbytes / (ms * 1e-3) / 1e9


# The largest WQE the sweep's gpu_push and host_staged messages go in, each rung when
# written, so that the engine delivers one while the block writes the next. Each doorbell
# is a system-scope release that waits for the block's stores to drain: in 64 KiB WQEs a
# 1 MiB gpu_push took 106 to 113 us instead of 71 on an H100 in session 7, and 88.5 to
# 89.7 against 55.8 to 59.9 in session 29 (16 KiB: 13.7 to 14.2 against 8.7 to 8.8 at 64
# KiB). In 256 KiB WQEs it took 41.9 to 42.7 us against 50.9 to 59.8 whole, and 40.8 to 40.9
# against 42.7 to 46.7 with twelve copy helpers; at 256 KiB, halves were level with the
# whole (256 threads, three rounds each, benchmarks/scripts/chunk_ab.py and
# helpers_chunk_ab.py, BENCHMARKS.md, session 29).
SWEEP_WQE_MAX_BYTES = 262144


def sweep_wqe_bytes(path: str, size: int) -> int:
    """The WQE size (``chunk_bytes``) a sweep point sends its messages in: gpu_push and
    host_staged in WQEs of at most SWEEP_WQE_MAX_BYTES; nic_pull whole (a pull has no GPU
    writes for the engine's work to overlap), and the inline path's messages fit one WQE.
    A multiple of 4, as ``runner.run`` requires (a chunk starts on a source word): a message
    sent in one WQE whose size is not gets its size rounded up."""
    if path in ("gpu_push", "host_staged"):
        wqe = max(65536, min(size, SWEEP_WQE_MAX_BYTES))
    else:
        wqe = max(size, 65536)
    return (wqe + 3) & ~3


def _sweep_bound_us(path, size, threads, floor_us, ceilings):
    """floor + size / ceiling for one point of the sweep (see the module's docstring)."""
    # Files before session 30 have no copy from HBM; before session 19 only the one from L2.
    warp = ceilings.get("warp_copy_hbm_gbytes", ceilings.get("warp_copy_fresh_gbytes",
                                                             ceilings.get("warp_copy_gbytes")))
    bulk = ceilings["bulk_store_gbytes"]
    # A 32-thread block's own copy is one warp's; a nic_pull's sender copies nothing (the
    # NIC reads its bytes, here the pull agent's blocks), so its bound is the bulk stores'
    # whatever the sender's block (until session 33 it divided by one warp's copy for 32
    # threads too, which let a 64 KiB pull meet a bound 2.6 times its hardware's).
    gbytes = warp if threads <= 32 and path != "nic_pull" else bulk
    # host_staged's second crossing is the NIC's DMA read of the bounce buffer, at PCIe's
    # pace whatever the block: counted at the bulk stores (until session 31 at the block's
    # copy, which let a 32-thread host_staged 1 MiB meet its bound at 0.53x).
    second = size / (bulk * 1e3) if path == "host_staged" else 0.0
    return floor_us + size / (gbytes * 1e3) + second


def _sweep_target(path, size):
    """The ratio a sweep point must stay under, or None where no target is set."""
    if path in ("gpu_push", "host_staged"):
        return TARGET_SWEEP_RATIO
    if path == "nic_pull":
        return {64: TARGET_PULL_64B_RATIO, 65536: TARGET_PULL_64K_RATIO}.get(size)
    return None


def sweep_engine_fixed(splits: dict) -> dict:
    """The engine's fixed cost per message, per (path, threads): its least median
    turnaround over the sizes swept (``splits``: (path, size, threads) -> the runs'
    ``engine_split_us``)."""
    fixed: dict = {}
    for (path, size, th), split in splits.items():
        e = float(np.median([x["engine"] for x in split]))
        fixed[(path, th)] = min(fixed.get((path, th), e), e)
    return fixed


# A delivery that exceeds the wire's time by less than this is not named: the engine's mean
# turnaround of small WQEs moves by about this much between runs of one point (0.13 to 0.25
# us at 64 B on an H200, session 33), so a ratio of such differences says nothing.
STAND_IN_SLACK_US = 0.1


# The wire the engine's delivery stands for: the model's NIC link (``network.rate_gbps``,
# IBTA NDR 4x, an assumption of the NIC; gpuwrite.model.nic).
def _link_gbps() -> float:
    from gpuwrite.model.nic import NetworkParams
    return NetworkParams().rate_gbps


def delivery_against_wire(path: str, wqe_bytes: int, engine_us: list[float],
                          fixed_us: float) -> dict | None:
    """What the engine's delivery of one WQE cost against the step it stands for. The
    engine copies a gpu_push or host_staged WQE from staging (or the bounce ring) to its
    destination after the doorbell, standing in for the NIC sending it on the wire: its
    delivery is its turnaround less its fixed cost (``fixed_us``, its least turnaround for
    that path and block over the sizes swept), the wire's time is the WQE's bytes at the
    model's link rate. ``costs_more``: the median delivery exceeds the wire's time by
    STAND_IN_SLACK_US or more, the stand-in costing more than the step it stands for (a NIC
    also sends a pushed WQE only after its doorbell, but at the wire's pace).
    None for the other paths (a pull's turnaround holds its read)."""
    if path not in ("gpu_push", "host_staged"):
        return None
    delivery = [max(0.0, e - fixed_us) for e in engine_us]
    gbps = _link_gbps()
    wire = wqe_bytes * 8 / (gbps * 1e3)
    median = float(np.median(delivery))
    return {"delivery_us": spread(delivery), "wire_us": wire, "link_gbps": gbps,
            "over_wire": median / wire,
            "costs_more": median - wire >= STAND_IN_SLACK_US}


def sweep_steps(path: str, threads: int, split: dict, bound_us: float,
                engine_fixed: dict, least_stores_us: float | None = None,
                floor_us: float | None = None,
                agent_us: float | None = None) -> tuple[dict, dict]:
    """(a run's steps, the bound's steps) for ``lost_in``: the engine's fixed cost and the
    GPU side (the bound less that cost). nic_pull's turnaround also holds its read (the
    pull agent's round trip, or the copy engine's call): measured against gpu_push's
    turnaround at the same block size, where that was swept, the rest is a step of its
    own, ``pull``, which the bound leaves no time for (the floor's answer needs no read);
    with the engine's round trip to the agent (``agent_us``, ``agent_wait_us``) that is a
    step of its own too, ``agent``, and ``pull`` the engine's part of the read beside it.
    A gpu_push or host_staged point with a measured least (``least_stores_us``, the
    fastest of its repeats) and the run's floor has a step ``stores`` too: what the stores
    it orders before its doorbell cost beyond the floor (the least less the floor), against
    as much of it as the bound allows for moving its bytes (the bound less the floor); the
    GPU side is the rest, against the floor's share and what is left of that allowance (the
    reads of a copy the least does not make). A miss named ``stores`` lost its time in
    the hardware's stores and their ordering, not in gpuwrite's bookkeeping."""
    fixed = engine_fixed[(path, threads)]
    if least_stores_us is not None and floor_us is not None:
        stores = max(0.0, least_stores_us - floor_us)
        allowed = min(stores, bound_us - floor_us)
        return ({"engine": split["engine"], "stores": stores, "gpu": split["gpu"] - stores},
                {"engine": fixed, "stores": allowed,
                 "gpu": bound_us - fixed - allowed})
    if path == "nic_pull" and ("gpu_push", threads) in engine_fixed:
        base = min(fixed, engine_fixed[("gpu_push", threads)])
        steps, shares = {"engine": base}, {"engine": base}
        read = split["engine"] - base
        if agent_us is not None:
            steps["agent"], shares["agent"] = agent_us, 0.0
            read -= agent_us
        steps.update(pull=read, gpu=split["gpu"])
        shares.update(pull=0.0, gpu=bound_us - base)
        return steps, shares
    return dict(split), {"engine": fixed, "gpu": bound_us - fixed}


# The smallest pull the sweep makes: the reverse trip that answers it with its bytes is
# the least answer the pull agent can give (``floor_reverse_64B_us``).
LEAST_PULL_BYTES = 64


def least_pull_us(size, threads, floor_us, reverse_us, ceilings):
    """The least a nic_pull of ``size`` bytes can take in emulated mode: the sender's
    round trip to the engine (the floor), the engine's to the pull agent answering
    LEAST_PULL_BYTES (``reverse_us``: the reverse trip with that payload copied and fenced)
    and the copy of the rest (at the bound's ceiling); every cost beyond the two trips
    and the copy (the engine's bookkeeping, the agent's ring, the polls' phases) is left
    out."""
    rest = max(0, size - LEAST_PULL_BYTES)
    return _sweep_bound_us("nic_pull", rest, threads, floor_us, ceilings) + reverse_us


# The block whose copy the bench measures (``block256_copy_*``): a push's least is known
# only for sweep points of this many threads.
BLOCK_COPY_THREADS = 256


def least_push_us(path, size, threads, floor_us, ceilings):
    """The least a gpu_push or host_staged message of ``size`` bytes can take when one
    block of ``threads`` copies it, or None where the bench did not measure that block's
    copy: the floor and the block's copy into host memory at its ceiling for a first-read
    source. The bound divides by the whole GPU's bulk stores, which one block cannot
    reach: where ``size`` / the block's copy exceeds the target's slack, no single-block
    sender can meet the target, whatever the engine does. host_staged's least is
    gpu_push's: its bound counts the NIC's read of the bounce ring (the hardware's second
    crossing), which emulated mode does not pay (``runner.EMULATION_NOTES``), so an
    emulated run can come in under a least that counts it (session 33, an H200: 1 MiB with
    256 threads 40.3 to 40.7 us against the 52.3 such a least said)."""
    block = ceilings.get("block256_copy_hbm_gbytes", ceilings.get("block256_copy_fresh_gbytes"))
    if path not in ("gpu_push", "host_staged") or threads != BLOCK_COPY_THREADS or not block:
        return None
    return floor_us + size / (block * 1e3)


# Measurements of the bulk-store ceiling at the bench's start (the highest is taken).
BULK_STORE_SAMPLES = 3
# A path whose bandwidth run beat the bulk-store ceiling by more than this fraction shows
# that the ceiling's measurement ran slow: ratios against it are no bound.
CEILING_SLACK = 0.05


def ceiling_exceeded(path_gbytes: dict, ceiling_gbytes: float) -> dict:
    """The paths whose best bandwidth run exceeded ``ceiling_gbytes`` by more than
    CEILING_SLACK, with that run over the ceiling: a ceiling a path beat was measured in a
    slow mode, and every ratio against it reads too kind."""
    return {p: g / ceiling_gbytes for p, g in path_gbytes.items()
            if g > (1 + CEILING_SLACK) * ceiling_gbytes}


def sweep_verdict(pt: dict) -> bool | None:
    """A sweep point's verdict: met when every judged run met its target, None (not
    judged) when no run was judged (each beat its bound, ``beats_bound``)."""
    return pt["runs_met"] == pt["runs_judged"] if pt["runs_judged"] else None


def beats_bound(path: str, ratio: float) -> bool:
    """Whether a gpu_push sweep run (``ratio`` to its bound) ran faster than its bound by
    more than CEILING_SLACK. A push pays the floor's round trip and copies its payload at
    no more than the ceiling's rate before its doorbell, so such a run read memory faster
    than the ceiling's copy did (its source partly in L2, the ceiling's in HBM) or the
    floor ran slow, and it is not judged: session 30's one-warp copy measured 8.1 to 8.3
    GB/s six times in a bench whose 1 MiB one-warp sends ran at 0.75 to 0.81x that bound.
    (host_staged's bound adds the NIC's read of the bounce buffer after the block's copy,
    where the engine overlaps the two: beating it says nothing.)"""
    return path == "gpu_push" and ratio < 1 - CEILING_SLACK


def sweep_ceilings(ceilings: dict, samples: list[dict]) -> dict:
    """``ceilings`` with each one that ``samples`` measured again replaced by the highest of
    its measurements, the one in ``ceilings`` included: a copy rate that was reached once
    is one the hardware allows (a measurement cannot come out faster than the copy it
    times), and the slower ones are the mode a run may or may not be in."""
    out = dict(ceilings)
    for key in {k for s in samples for k in s}:
        vals = [s[key] for s in samples if key in s] + ([ceilings[key]] if key in ceilings else [])
        out[key] = float(max(vals))
    return out


# Where the sweep's sends find their source: read from HBM, as its copy ceilings
# (``*_hbm_gbytes``) read theirs, so that a run and its bound read the same memory (with
# the source as its upload left it, one warp's 1 MiB sends took 95 to 124 us by run
# against an HBM bound of 131 to 136; BENCHMARKS.md, session 30).
SWEEP_SOURCE_L2 = "evicted"


def latency_sweep(floor_us: float, ceilings: dict, *, sizes=SWEEP_SIZES, paths=SWEEP_PATHS,
                  threads=SWEEP_THREADS, n_qps: int = 1, iters: int = SWEEP_ITERS,
                  repeats: int = SWEEP_REPEATS, step=lambda msg: None,
                  reverse_us: float | None = None, repeat_ceilings=None,
                  repeat_floor=None, repeat_push_least=None) -> list[dict]:
    """Latency vs size, one message in flight per QP, every point run ``repeats`` times in
    turn with the others; each run judged against floor + size / ceiling. With the reverse
    floor, nic_pull's points also carry their least (``least_pull_us``); with the block's
    copy ceiling, gpu_push's and host_staged's points of that block (``least_push_us``).
    ``repeat_ceilings``, where given, is called before each repeat and returns ceilings
    measured then (the one-block copies): every point is then judged against the highest
    of each such ceiling over those measurements and the one in ``ceilings``
    (``sweep_ceilings``), a rate that moves between measurements of one process.
    ``repeat_floor``, where given, is called before each repeat and returns the floor
    measured then: each run is judged against its own repeat's floor (as each 64-byte
    latency run is), and a point's ``bound_us`` and least use the median of those floors;
    without it every run is judged against ``floor_us``. ``repeat_push_least``, where
    given, is called before each repeat with the (path, size, threads) of the gpu_push and
    host_staged points of one WQE (at most K.RING_EACH_BYTES) and returns each one's
    measured least
    (``least_push_stores_us``): those points carry its runs (``least_stores_us``), and their
    least is the larger of the fastest of them and ``least_push_us`` (``least_kind``:
    "stores" or "copy")."""
    points = [(p, n, t) for t in threads for p in paths for n in sizes
              if not (p == "gpu_push_inline" and n > runner.INLINE_SIZES[-1])]
    runs: dict = {pt: [] for pt in points}
    hosts: dict = {pt: [] for pt in points}
    samples: list[dict] = []
    floors: list[float] = []
    one_wqe = [pt for pt in points if pt[0] in PUSHED_PATHS and pt[1] <= K.RING_EACH_BYTES]
    push_leasts: dict = {pt: [] for pt in one_wqe}
    for k in range(repeats):
        step(f"latency vs size ({k + 1} of {repeats})")
        if repeat_ceilings:
            samples.append(repeat_ceilings())
        floors.append(repeat_floor() if repeat_floor else floor_us)
        if repeat_push_least and one_wqe:
            for pt, us in repeat_push_least(one_wqe).items():
                push_leasts[pt].append(us)
        for path, size, th in points:
            count = max(20, min(iters, iters * 4096 // size))
            r, host = hostload.watched_run(
                runner.run, path, [size] * (count * n_qps), n_qps=n_qps, wait_each=True,
                block_threads=th, chunk_bytes=sweep_wqe_bytes(path, size),
                stage_slot_bytes=4096 if size > 65536 else 256, source_l2=SWEEP_SOURCE_L2)
            runs[(path, size, th)].append(r)
            hosts[(path, size, th)].append(host)
    splits = {pt: [engine_split_us(r) for r in rs] for pt, rs in runs.items()}
    engine_fixed = sweep_engine_fixed(splits)
    out = []
    ceilings = sweep_ceilings(ceilings, samples)
    floor_us = float(np.median(floors))
    for (path, size, th), rs in runs.items():
        bound = _sweep_bound_us(path, size, th, floor_us, ceilings)
        target = _sweep_target(path, size)
        p50s = [r.latency_p50_us for r in rs]
        split = splits[(path, size, th)]
        stores = push_leasts.get((path, size, th))
        least_stores = min(stores) if stores else None
        agent = [agent_wait_us(r.counters) for r in rs]
        judged = []
        for r, sp, host, floor, ag in zip(rs, split, hosts[(path, size, th)], floors, agent):
            run_bound = _sweep_bound_us(path, size, th, floor, ceilings)
            ratio = r.latency_p50_us / run_bound
            row = {"p50_us": r.latency_p50_us, "bound_us": run_bound, "ratio": ratio,
                   "delivered": f"{r.delivered}/{r.messages}", "host": host,
                   "copy": copy_split_side(r)}
            if target is not None and beats_bound(path, ratio):
                row["judged"] = False
            elif target is not None:
                row["met"] = ratio <= target
                if not row["met"]:
                    row["lost_in"] = lost_in(*sweep_steps(path, th, sp, run_bound,
                                                          engine_fixed, least_stores, floor, ag))
            judged.append(row)
        point = {"path": path, "size_bytes": size, "threads": th, "bound_us": bound,
                 "wqe_bytes": min(size, sweep_wqe_bytes(path, size)),
                 "target_ratio": target, "kernel": rs[0].kernel}
        least = (least_pull_us(size, th, floor_us, reverse_us, ceilings)
                 if path == "nic_pull" and reverse_us is not None
                 else least_push_us(path, size, th, floor_us, ceilings))
        kind = "pull" if path == "nic_pull" else "copy"
        if stores:
            # The fastest of its measurements: the round trip's polls land in one phase or
            # another by launch (session 36, an H200: a 64-byte push's stores took 3.30 to
            # 3.58 us by repeat, where the push itself ran 3.33 to 3.46), and what the
            # hardware allowed once is a least.
            point["least_stores_us"] = spread(stores)
            if least is None or least_stores > least:
                least, kind = least_stores, "stores"
        if all(a is not None for a in agent):
            point["agent_us"] = spread(agent)     # the engine's round trip to the pull agent
        stand_in = delivery_against_wire(path, point["wqe_bytes"], [x["engine"] for x in split],
                                         engine_fixed[(path, th)])
        if stand_in is not None:
            point["stand_in"] = stand_in
        if least is not None:
            point.update(least_us=least, least_ratio=least / bound, least_kind=kind)
            if target is not None:
                point["target_below_least"] = point["least_ratio"] > target
        out.append({**point, "p50_us": spread(p50s),
                    "p99_us": spread([r.latency_p99_us for r in rs]),
                    "ratio": spread([j["ratio"] for j in judged]),
                    "engine_us": spread([x["engine"] for x in split]),
                    "runs_engine_slow": engine_slow_runs(p50s, [x["engine"] for x in split]),
                    "runs_host_busy": host_busy_runs(p50s, hosts[(path, size, th)]),
                    "runs_met": sum(1 for j in judged if j.get("met")) if target else None,
                    "runs_judged": sum(1 for j in judged if "met" in j) if target else None,
                    "runs": judged, "emulation": rs[0].emulation})
    return out


def run_suite(quick: bool = False, progress=None, *, sizes=SWEEP_SIZES, paths=SWEEP_PATHS,
              threads=SWEEP_THREADS, n_qps: int = 1, iters: int | None = None,
              repeats: int | None = None, sweep_only: bool = False) -> dict:
    """Everything ``gpuwrite bench`` measures. ``sizes``, ``paths``, ``threads``, ``n_qps``
    and ``iters`` shape the latency-vs-size sweep; ``repeats`` every repeated figure;
    ``sweep_only`` skips the three targets' runs."""
    if SIMULATOR:
        raise RuntimeError("gpuwrite bench measures a real GPU; none was found (the CUDA "
                           "simulator's timings would be Python's, not a GPU's)")
    step = progress or (lambda msg: None)
    lat_n = iters or (200 if quick else 2000)
    reps = repeats or (2 if quick else LATENCY_REPEATS)
    out: dict = {"targets": {"latency_ratio_max": TARGET_LATENCY_RATIO,
                             "bandwidth_ratio_min": TARGET_BANDWIDTH_RATIO,
                             "rate_mpps_min": TARGET_RATE_MPPS,
                             "sweep_ratio_max": TARGET_SWEEP_RATIO,
                             "nic_pull_64B_ratio_max": TARGET_PULL_64B_RATIO,
                             "nic_pull_64KiB_ratio_max": TARGET_PULL_64K_RATIO},
                 "repeats": reps}
    # The GPU's clocks and what held them back (NVML), at the start, before each sweep
    # repeat and at the end (gpuwrite.bench.gpustate).
    out["gpu_state"] = {"start": gpustate.sample(), "sweep_repeats": []}
    step("floor: doorbell ping-pong")
    floor_pingpong_us(100)
    step("ceilings: bulk GPU stores to host, one block's vector copy")
    # The bulk stores measured 36.1 GB/s once, at the start of a session-30 bench whose 1
    # MiB gpu_push runs then moved 51.3 to 52.2 (1.44x "the ceiling"); 51.8 in the calls
    # before and after. A ceiling is the best of a few measurements (each 3 x 256 MiB).
    bulk_nbytes = 64 << 20 if quick else 256 << 20
    bulk = [bulk_store_gbytes(bulk_nbytes) for _ in range(BULK_STORE_SAMPLES)]
    out["bulk_store_runs_gbytes"] = spread(bulk)
    ceilings = {"bulk_store_gbytes": max(bulk),
                "warp_copy_gbytes": block_copy_gbytes(32),
                "warp_copy_fresh_gbytes": block_copy_gbytes(32, fresh=True),
                "block256_copy_gbytes": block_copy_gbytes(BLOCK_COPY_THREADS),
                "block256_copy_fresh_gbytes": block_copy_gbytes(BLOCK_COPY_THREADS, fresh=True),
                **hbm_copy_ceilings()}
    out.update(ceilings)
    out["engine_copy_threads"] = default_copy_threads(1)
    out["engine_cached_dst_max_bytes"] = default_cached_dst_max_bytes()
    out["floor_pingpong_us"] = floor_median_us(lat_n)
    step("floor with several readers")
    out["floor_readers"] = {"readers": FLOOR_READERS, "spacing_ns": FLOOR_READER_SPACING_NS,
                            "us": spread([floor_readers_us(lat_n) for _ in range(3)])}
    step("reverse floor: the host pings a GPU warp")
    out["floor_reverse_us"] = spread([reverse_floor_us(lat_n) for _ in range(3)])
    out["floor_reverse_64B_us"] = spread([reverse_floor_us(lat_n, LEAST_PULL_BYTES)
                                          for _ in range(3)])
    if not sweep_only:
        _three_targets(out, quick, lat_n, reps, step)
    # One warp's copy of a first-read source is bimodal on the H100 hosts, about 8 or about
    # 12 GB/s by measurement, and the sweep's one-warp sends alike (1 MiB gpu_push about
    # 140 or 95 us), each in its mode independently of the other (BENCHMARKS.md, session
    # 30): the modes are where the source sits, about 8 GB/s from HBM, 16 from L2, and 9
    # to 13 for a source its upload left partly in L2. The sweep's bounds and leasts divide
    # by the copies of a source evicted from L2 first (``*_hbm_gbytes``: what a first
    # read costs), measured again before each repeat with the bulk stores, the highest of
    # each taken (``sweep_ceilings``); every measurement is kept (``sweep_ceilings_gbytes``).
    # The sweep's sends read HBM too (``SWEEP_SOURCE_L2``: L2 written over between each
    # run's upload and its kernel); a run that still beats its bound by 5 % is not judged
    # (``beats_bound``).
    out["sweep_source_l2"] = SWEEP_SOURCE_L2
    by_repeat: list[dict] = []

    def repeat_ceilings() -> dict:
        out["gpu_state"]["sweep_repeats"].append(gpustate.sample())
        c = {"bulk_store_gbytes": bulk_store_gbytes(bulk_nbytes), **hbm_copy_ceilings()}
        by_repeat.append(c)
        return c

    # The floor's p50 sits in one phase of its polls against the answer for a while, then
    # in another: a bench's floors at its start and in its 64-byte latency runs a minute
    # later differed by 0.26 to 0.29 us (2.85 against 3.01 to 3.14, and 3.14 against 2.78
    # to 2.91, two H200s; BENCHMARKS.md, session 34), a tenth of the bound at 64 B to 4 KiB.
    # The sweep measures it again before each repeat, as it does the ceilings, and judges
    # each run against its own repeat's.
    sweep_floors: list[float] = []

    def repeat_floor() -> float:
        sweep_floors.append(floor_median_us(lat_n))
        return sweep_floors[-1]

    out["sweep"] = latency_sweep(out["floor_pingpong_us"], ceilings, sizes=sizes, paths=paths,
                                 threads=threads, n_qps=n_qps, iters=iters or SWEEP_ITERS,
                                 repeats=reps, step=step,
                                 reverse_us=out["floor_reverse_64B_us"]["median"],
                                 repeat_ceilings=repeat_ceilings, repeat_floor=repeat_floor,
                                 repeat_push_least=lambda pts: {
                                     (p, n, t): least_push_stores_us(n, t, lat_n, p)
                                     for p, n, t in pts})
    out["sweep_floor_runs_us"] = spread(sweep_floors)
    out["sweep_ceilings_gbytes"] = {k: spread([ceilings[k]] + [c[k] for c in by_repeat])
                                    for k in by_repeat[0]}
    out["gpu_state"]["end"] = gpustate.sample()
    out["verdict"] = out.get("verdict", {})
    read = poll_read_us(out.get("floor_by_answer_delay_us", {}))
    if read is not None:
        out["poll_read_us"] = read
    for pt in out["sweep"]:
        pt["runs_a_poll_read_later"] = poll_phase_runs([r["p50_us"] for r in pt["runs"]], read)
        if pt["target_ratio"] is not None:
            key = sweep_key(pt)
            out["verdict"][key] = sweep_verdict(pt)
            if pt.get("target_below_least"):
                out.setdefault("targets_below_least", {})[key] = pt["least_ratio"]
    return out


def sweep_key(pt: dict) -> str:
    """A sweep point's name in ``verdict`` and ``targets_below_least``."""
    return f"sweep {pt['path']} {pt['size_bytes']} B {pt['threads']} thr"


def poll_read_us(stairs: dict) -> float | None:
    """The completion poll's read, from the floor answered late (``floor_by_answer_delay_us``,
    delay ns -> us): the largest rise between consecutive delays, where it is at least half
    a microsecond; None where no delay moved the floor that much. The poll is a chain of
    reads of host memory, one in flight at a time, so an answer that misses a read waits
    for the next: the floor rises by a whole read (1.1 us on H100 hosts) at some delay."""
    vals = [stairs[k] for k in sorted(stairs, key=int)]
    rise = max((b - a for a, b in zip(vals, vals[1:])), default=0.0)
    return rise if rise >= POLL_READ_MIN_US else None


def whole_reads(extra_us: float, read_us: float | None, tol: float = 0.25) -> int:
    """How many whole completion-poll reads ``extra_us`` is (1 or more, within ``tol`` of
    one read), else 0; 0 without a read."""
    if not read_us:
        return 0
    n = round(extra_us / read_us)
    return n if n >= 1 and abs(extra_us - n * read_us) <= tol * read_us else 0


def poll_phase_runs(p50s, read_us: float | None) -> list[int]:
    """The runs of one point slower than its fastest by about a whole number of completion
    poll reads (``whole_reads``): runs whose completion was found a read or more later, the
    poll's phase rather than the path's work. [] without a read."""
    lo = min(p50s)
    return [k for k, p in enumerate(p50s) if whole_reads(p - lo, read_us)]


# A sweep run is an engine slow run when it is slower than its point's fastest run by at
# least this fraction of that run and ENGINE_SLOW_MIN_US, and the engine's mean turnaround
# grew by at least ENGINE_SLOW_SHARE of that: the 256 KiB points of session 29 were a run
# 15 us or a run 43, with the engine's turnaround 5 to 108 us by run (BENCHMARKS.md).
ENGINE_SLOW_FRACTION = 0.2
ENGINE_SLOW_MIN_US = 1.0
ENGINE_SLOW_SHARE = 0.5


def slow_runs(p50s) -> tuple[int, list[int]]:
    """A point's fastest run, and its runs slower than that by at least ENGINE_SLOW_FRACTION
    of it and ENGINE_SLOW_MIN_US (``p50s``: each run's, us)."""
    best = min(range(len(p50s)), key=lambda k: p50s[k])
    least = max(ENGINE_SLOW_FRACTION * p50s[best], ENGINE_SLOW_MIN_US)
    return best, [k for k, p in enumerate(p50s) if p - p50s[best] >= least]


def engine_slow_runs(p50s, engines) -> list[int]:
    """The runs of one point that lost their time in the engine against its fastest run
    (``p50s`` and ``engines``, the engine's mean turnaround, per run, us): slow by
    ``slow_runs``, at least ENGINE_SLOW_SHARE of it the engine's. A run whose extra time is
    on the GPU side is not one."""
    best, slow = slow_runs(p50s)
    return [k for k in slow
            if engines[k] - engines[best] >= ENGINE_SLOW_SHARE * (p50s[k] - p50s[best])]


# Involuntary switches a slow run must have beyond its point's fastest run to count as
# the host's: a few come with any run (the driver's threads, the engine's start and stop).
HOST_BUSY_MIN_SWITCHES = 10


def host_busy_runs(p50s, hosts) -> list[int]:
    """The runs of one point slow by ``slow_runs`` during which the host took CPU time
    from this process more than during the fastest: steal time (the hypervisor ran another
    guest) where the fastest had none, or more involuntary context switches of this
    process's threads than the fastest had, twice over and by HOST_BUSY_MIN_SWITCHES.
    ``hosts``: ``hostload.between`` of each run."""
    best, slow = slow_runs(p50s)
    ref = hosts[best]
    out = []
    for k in slow:
        h = hosts[k]
        stolen = bool(h.get("steal_ms")) and not ref.get("steal_ms")
        switched = h["involuntary_switches"] >= max(2 * ref["involuntary_switches"],
                                                    ref["involuntary_switches"]
                                                    + HOST_BUSY_MIN_SWITCHES)
        if stolen or switched:
            out.append(k)
    return out


def latency_least(leasts, floors) -> dict:
    """The 64-byte push's least (``least_push_64B_us`` of each repeat) against the floor of
    the same repeat: ``least_us``, ``least_ratio`` and whether the target lies below it
    (every repeat's ratio above TARGET_LATENCY_RATIO: then no push that orders its stores
    before its doorbell met the target on this machine, whatever the emulated NIC does).
    Every repeat, not the median: the round trip's polls land in one phase or another by
    launch, and a least is what the hardware allowed at its fastest (until session 36 the
    median ratio decided)."""
    ratios = [x / f for x, f in zip(leasts, floors)]
    return {"least_us": spread(leasts), "least_ratio": spread(ratios),
            "target_below_least": min(ratios) > TARGET_LATENCY_RATIO}


def latency_misses(p50s, floors, leasts, split, breakdowns, hosts) -> list[dict]:
    """The 64-byte push's repeats that missed the target (p50 over TARGET_LATENCY_RATIO x
    that repeat's floor), each with the step that lost the time (``lost_in``: the engine's
    turnaround against its fastest repeat, the GPU side against the floor's share), the
    push's breakdown and the host's record, and that repeat's least: ``least_ratio`` (the
    ping-pong after the push's own stores against the floor) and ``over_least_us`` (the
    push's p50 less that least). A miss whose least_ratio is itself over the target is one
    no push that keeps the verbs' ordering could have met in that repeat (session 42: two
    H200s where the push ran within 0.13 us of its least in every repeat)."""
    fixed = min(x["engine"] for x in split)
    return [{"run": k, "ratio": p / f,
             "lost_in": lost_in(split[k], {"engine": fixed, "gpu": f - fixed}),
             "least_ratio": least / f, "over_least_us": p - least,
             "breakdown_ns": breakdowns[k], "host": hosts[k]}
            for k, (p, f, least) in enumerate(zip(p50s, floors, leasts))
            if p / f > TARGET_LATENCY_RATIO]


def latency_repeats(lat_n: int, repeats: int, kw: dict, step):
    """The 64-byte latency's ``repeats``, each the floor, the push's least and every path
    in turn (runner.run with ``kw``), ``lat_n`` messages or ping-pongs each: each repeat's
    floor (the median of its FLOOR_SAMPLES ping-pongs, as the sweep's), those ping-pongs,
    the leasts, each path's runs and hosts, and the breakdowns. Until session 41 the floor
    of a repeat was one ping-pong: the floor's round trip comes out in one of two modes
    about 0.3 us apart by launch (2.8 and 3.1 us on the H200s of sessions 40 and 41, where
    the push's p50 held at 3.07 to 3.20), so one launch in a low mode decided a repeat
    whose push was as fast as the others'."""
    floors: list[float] = []
    samples: list[list[float]] = []
    leasts: list[float] = []
    runs_lat: dict[str, list] = {p: [] for p in runner.PATHS}
    hosts_lat: dict[str, list] = {p: [] for p in runner.PATHS}
    breakdowns = []
    for k in range(repeats):
        step(f"64-byte latency: floor and every path ({k + 1} of {repeats})")
        samples.append(floor_samples_us(lat_n))
        floors.append(float(np.median(samples[-1])))
        leasts.append(least_push_64B_us(lat_n))
        for path in runner.PATHS:
            r, host = hostload.watched_run(runner.run, path, [64] * lat_n, **kw)
            runs_lat[path].append(r)
            hosts_lat[path].append(host)
        breakdowns.append(push_breakdown(lat_n))
    return floors, samples, leasts, runs_lat, hosts_lat, breakdowns


def _three_targets(out: dict, quick: bool, lat_n: int, repeats: int, step) -> None:
    """The foundation's three targets, each judged in every one of ``repeats`` runs."""
    # The floor as the calibration measures it polls right after its store. A read that
    # leaves at once can reach host memory before the answer and waste a round trip, so
    # the floor and gpu_push are also measured with pauses before the first poll
    # (I_POLL_DELAY_NS). The target is judged as a user meets it: gpu_push with the
    # QueueSet's default pause (DEFAULT_POLL_DELAY_NS), the floor polling at once; the
    # sweeps show how much the phase of the first poll moves each, and the ratio of each
    # side at its best pause is kept beside (BENCHMARKS.md).
    out["floor_by_poll_delay_us"] = {str(d): floor_pingpong_us(lat_n, d) for d in POLL_DELAYS_NS}
    out["floor_by_answer_delay_us"] = {str(d): floor_pingpong_us(lat_n, answer_delay_ns=d)
                                       for d in ANSWER_DELAYS_NS}
    # The floor's p50 moves between runs of one process by up to 0.3 us on an H200 (the
    # phase of its polls against the answer; BENCHMARKS.md, session 4): the floor and
    # every path are run in turn, and each path's run is judged against the floor of
    # its own repeat.
    # The queues' defaults, named so that the result can say what ran.
    kw = dict(n_qps=1, wait_each=True, block_threads=32, poll_delay_ns=DEFAULT_POLL_DELAY_NS,
              poll_adapt=True)
    for path in runner.PATHS:
        runner.run(path, [64] * 50, **kw)
    floors, samples, leasts, runs_lat, hosts_lat, breakdowns = latency_repeats(
        lat_n, repeats, kw, step)
    out["floor_runs_us"] = spread(floors)
    out["floor_samples_us"] = samples
    lat = {}
    for path, rs in runs_lat.items():
        ratios = [r.latency_p50_us / f for r, f in zip(rs, floors)]
        lat[path] = {"p50_us": spread([r.latency_p50_us for r in rs]),
                     "p99_us": spread([r.latency_p99_us for r in rs]),
                     "ratio_to_floor": spread(ratios),
                     "delivered": min(r.delivered for r in rs), "messages": rs[0].messages,
                     "kernel": rs[0].kernel, "emulation": rs[0].emulation,
                     "host": hosts_lat[path]}
    lat["gpu_push"]["misses"] = latency_misses(
        [r.latency_p50_us for r in runs_lat["gpu_push"]], floors, leasts,
        [engine_split_us(r) for r in runs_lat["gpu_push"]], breakdowns, hosts_lat["gpu_push"])
    lat["gpu_push"].update(latency_least(leasts, floors))
    out["latency_64B"] = lat
    out["latency_breakdown_ns"] = {k: spread([b[k] for b in breakdowns]) for k in breakdowns[0]}
    step("gpu_push: 64-byte latency by poll delay")
    # Each pause held fixed (poll_adapt=False): the default run above starts at
    # DEFAULT_POLL_DELAY_NS and adapts.
    out["gpu_push_64B_by_poll_delay_us"] = {
        str(d): runner.run("gpu_push", [64] * lat_n, n_qps=1, wait_each=True, block_threads=32,
                           poll_delay_ns=d, poll_adapt=False).latency_p50_us
        for d in (0, *POLL_DELAYS_NS)}
    out["gpu_push_poll_delay_ns"] = kw["poll_delay_ns"]
    out["gpu_push_poll_adapt"] = kw["poll_adapt"]
    best_push = min([lat["gpu_push"]["p50_us"]["median"],
                     *out["gpu_push_64B_by_poll_delay_us"].values()])
    best_floor = min([out["floor_pingpong_us"], *out["floor_by_poll_delay_us"].values()])
    out["latency_best_pause_each_ratio"] = best_push / best_floor

    mib = 1 << 20
    n_big = 256 if quick else 1024
    # Runs of one configuration differ by up to 0.1x on an H200 (BENCHMARKS.md): each
    # path is run ``repeats`` times, in turn with the others, and every run is judged.
    runs: dict[str, list] = {p: [] for p in ("gpu_push", "nic_pull", "host_staged")}
    hosts: dict[str, list] = {p: [] for p in runs}
    for k in range(repeats):
        for path in runs:
            step(f"{path}: 1 MiB bandwidth ({k + 1} of {repeats})")
            r, host = hostload.watched_run(runner.run, path, [mib] * n_big, **BANDWIDTH_RUN[path])
            runs[path].append(r)
            hosts[path].append(host)
    bw = {}
    for path, rs in runs.items():
        gb = [r.throughput_gbps / 8 for r in rs]
        split = [engine_split_us(r) for r in rs]
        ref = {k: float(np.median([x[k] for x in split])) for k in split[0]}
        bw[path] = {"gbytes": spread(gb),
                    "ratio_to_bulk_store": spread([g / out["bulk_store_gbytes"] for g in gb]),
                    "delivered": min(r.delivered for r in rs), "messages": rs[0].messages,
                    "wqe_bytes": BANDWIDTH_RUN[path]["chunk_bytes"],
                    "workers": BANDWIDTH_RUN[path]["workers"], "engine_cpus": rs[0].engine_cpus,
                    "kernel": rs[0].kernel, "emulation": rs[0].emulation, "host": hosts[path],
                    "misses": [{"run": k, "gbytes": g, "lost_in": lost_in(split[k], ref),
                                "host": hosts[path][k]}
                               for k, g in enumerate(gb)
                               if g / out["bulk_store_gbytes"] < TARGET_BANDWIDTH_RATIO]}
    out["bandwidth_1MiB"] = bw
    over = ceiling_exceeded({p: v["gbytes"]["max"] for p, v in bw.items()},
                            out["bulk_store_gbytes"])
    if over:
        out["bulk_store_below_paths"] = over

    rate = {}
    n_qps = 256
    per_qp = 500 if quick else 2000
    for path in ("gpu_push", "gpu_push_inline"):
        rs, host = [], []
        for k in range(repeats if path == "gpu_push" else 1):
            step(f"{path}: 64-byte message rate ({k + 1})")
            r, h = hostload.watched_run(runner.run, path, [64] * (n_qps * per_qp), n_qps=n_qps,
                                        batch=RATE_BATCH, block_threads=32,
                                        workers=RATE_WORKERS)
            rs.append(r)
            host.append(h)
        mpps = [message_rate_mpps(r) for r in rs]
        split = [engine_split_us(r) for r in rs]
        ref = {k: float(np.median([x[k] for x in split])) for k in split[0]}
        rate[path] = {"mpps": spread(mpps), "delivered": min(r.delivered for r in rs),
                      "messages": rs[0].messages, "workers": RATE_WORKERS,
                      "engine_cpus": rs[0].engine_cpus, "kernel": rs[0].kernel,
                      "engine": rate_engine_side(rs, n_qps * -(-per_qp // RATE_BATCH)),
                      "host": host,
                      "misses": [{"run": k, "mpps": m, "lost_in": lost_in(split[k], ref),
                                  "host": host[k]}
                                 for k, m in enumerate(mpps) if m < TARGET_RATE_MPPS]}
    out["rate_64B"] = rate
    n = f"{repeats} of {repeats} runs"
    if lat["gpu_push"]["target_below_least"]:
        out.setdefault("targets_below_least", {})[f"latency ({n})"] = \
            lat["gpu_push"]["least_ratio"]["min"]
    out["verdict"] = {
        f"latency ({n})": all(x <= TARGET_LATENCY_RATIO
                              for x in lat["gpu_push"]["ratio_to_floor"]["runs"]),
        f"bandwidth ({n})": all(x >= TARGET_BANDWIDTH_RATIO
                                for x in bw["gpu_push"]["ratio_to_bulk_store"]["runs"]),
        f"rate ({n})": all(x >= TARGET_RATE_MPPS for x in rate["gpu_push"]["mpps"]["runs"]),
    }
