"""Host verbs of the emulated NIC: context, protection domain, memory regions, queues.

The shapes follow ibverbs (and pyverbs): a :class:`Context` is an opened NIC (here the
software engine), a :class:`ProtectionDomain` groups memory regions and queues, a
:class:`MemoryRegion` has an lkey/rkey, bounds and access flags, and a :class:`QueueSet`
holds queue pairs with their completion queues, in GPU-visible memory, and hands
kernels the handles they need (``QueueSet.device_args``). Each is a context manager
and releases what it holds.

Ownership follows the NIC, not the Python objects: a registration (memory region, queue
set) pins its memory in the context's engine handle until the engine has let go of it
(deregistration or destruction returns only then), and a context dropped without
``close()`` is closed by its finalizer, which stops the engine threads before any pinned
memory is released.
"""
from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import numbers
import operator
import os
import random
import threading
import warnings
import weakref
from dataclasses import asdict, dataclass

import numpy as np

from gpuwrite import layouts as L
from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.cudaenv import SIMULATOR, check_capability, cuda, lazy_loading
from gpuwrite.device import verbs as dv
from gpuwrite.host.memory import cpu_reaches, describe, device_zeros, gpu_reaches, mapped

POLICIES = {"hold": L.POLICY_HOLD, "drop": L.POLICY_DROP}
_ERRLEN = 256


class VerbsError(RuntimeError):
    """A host verb failed; the message says which value was wrong and what is allowed."""


def _check(rc: int, err) -> None:
    if rc != 0:
        raise VerbsError(ffi.string(err).decode())


def _int_in(name: str, value, low: int, high: int, why: str = "") -> int:
    """``value`` as an int in [low, high], or a ValueError naming it and the range
    (before it reaches cffi, whose OverflowError names neither)."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r}: allowed an integer from {low} to {high}{why}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name}={value!r}: allowed an integer from {low} to {high}{why}") \
            from None
    if not low <= number <= high:
        raise ValueError(f"{name}={number}: allowed {low} to {high}{why}")
    return number


def _pow2(name: str, value: int, low: int, high: int) -> int:
    value = _int_in(name, value, low, high, " (a power of two)")
    if value & (value - 1):
        raise ValueError(f"{name}={value}: must be a power of two from {low} to {high}")
    return value


U32_MAX = 0xFFFFFFFF
# Link and drain rates: 0 (no model / the link rate) or finite within this range. The
# slowest rate keeps a 4096-byte packet's serialisation time (4096 * 8 / rate ns) at
# 33 s, far from overflowing the engine's 64-bit nanosecond clock arithmetic.
RATE_MIN_GBPS = lib.GW_RATE_MIN_KBPS / 1e6
RATE_MAX_GBPS = float(lib.GW_RATE_MAX_GBPS)


def _rate(name: str, value, zero_means: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        # float("10") would pass here and fail later inside cffi, naming neither
        raise ValueError(f"{name}={value!r}: must be a number (Gb/s)")
    rate = float(value)
    if isinstance(value, bool) or not (rate == 0 or (math.isfinite(rate)
                                                      and RATE_MIN_GBPS <= rate <= RATE_MAX_GBPS)):
        raise ValueError(f"{name}={value!r}: allowed 0 ({zero_means}) or a finite rate from "
                         f"{RATE_MIN_GBPS:g} to {RATE_MAX_GBPS:g} Gb/s")
    return rate


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
        _rate("rate_gbps", self.rate_gbps, "unlimited")
        _rate("drain_gbps", self.drain_gbps, "the link rate")
        if (isinstance(self.mtu_bytes, bool) or not isinstance(self.mtu_bytes, numbers.Integral)
                or self.mtu_bytes not in (256, 512, 1024, 2048, 4096)):
            raise ValueError(f"mtu_bytes={self.mtu_bytes!r}: allowed 256, 512, 1024, 2048, 4096 "
                             "(InfiniBand MTUs)")
        _int_in("rx_credits", self.rx_credits, 0, U32_MAX, " blocks of 64 bytes (0: unlimited)")
        _int_in("credit_latency_ns", self.credit_latency_ns, 0, lib.GW_MAX_CREDIT_LATENCY_NS)
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


class _NumberPool:
    """Numbers from ``first`` below ``end``, the lowest free one first; a number given
    back is handed out again (fresh ones are counted, not listed, so a large range
    costs nothing)."""

    def __init__(self, first: int, end: int):
        self._fresh = first
        self._end = end
        self._returned: list[int] = []   # a heap

    def free(self) -> int:
        return self._end - self._fresh + len(self._returned)

    def take(self) -> int:
        if self._returned:
            return heapq.heappop(self._returned)
        if self._fresh >= self._end:
            raise IndexError("pool exhausted")
        self._fresh += 1
        return self._fresh - 1

    def give(self, number: int) -> None:
        heapq.heappush(self._returned, int(number))


# Buffers a GPU pull agent may still write into: a pull into them timed out (its WQE
# failed with pull_failed) and the agent has not answered it. A NIC never writes after
# the error completion, so these are never freed: kept for the life of the process.
_LATE_PINS: list = []


def _keep_for_late_pulls(buffers, what: str) -> None:
    _LATE_PINS.extend(buffers)
    warnings.warn(f"{what}: the GPU pull agent has not answered a pull into it that timed "
                  "out (its WQE completed with pull_failed) and may still write there, so "
                  "its memory is kept for the life of the process", RuntimeWarning, stacklevel=3)


_CLOSED = "the context is closed: its engine, regions and queues are gone (open a new Context)"


class _Engine:
    """The C engine and the memory it may touch.

    Every buffer the engine reads or writes (registered regions, queue rings) is pinned
    here under its registration's name until the engine has let go of it. The object
    refers to no Context, so a Context's finalizer can own it: when a Context is
    collected, ``destroy`` stops the engine threads before the pins are released.

    Every call into the engine goes through ``use()``: cffi lets go of the GIL during a
    call, so without it a ``close()`` in one thread freed the engine under another
    thread's call (a crash). ``destroy`` refuses new calls, then waits for those in
    flight.
    """

    def __init__(self, ptr):
        self.ptr = ptr
        self.pins: dict[tuple, object] = {}
        self._calls = 0
        self._idle = threading.Condition(threading.Lock())

    @contextlib.contextmanager
    def use(self):
        """The engine pointer, valid until the block ends; VerbsError once closed."""
        with self._idle:
            ptr = self.ptr
            if ptr is None:
                raise VerbsError(_CLOSED)
            self._calls += 1
        try:
            yield ptr
        finally:
            with self._idle:
                self._calls -= 1
                if not self._calls:
                    self._idle.notify_all()

    def destroy(self) -> None:
        with self._idle:
            ptr, self.ptr = self.ptr, None
            while self._calls:
                self._idle.wait()
        if ptr is not None:
            late = lib.gw_engine_late_pulls(ptr, 0, 0)
            lib.gw_engine_destroy(ptr)   # joins the engine threads, flushes live QPs
            if late:
                _keep_for_late_pulls(list(self.pins.values()), f"a context closed with {late} "
                                     "unanswered late pull(s): every buffer it pinned")
            # A pinned object with a life of its own beyond the engine (the GPU pull agent,
            # whose kernel polls its ring) decides whether it must outlive the pins.
            for pin in list(self.pins.values()):
                gone = getattr(pin, "engine_gone", None)
                if gone is not None:
                    gone()
        self.pins.clear()


# Threads of the host process the default copy helpers leave CPUs for: the one that
# launches kernels and waits for them, and the GPU driver's.
HOST_THREADS = 2


# The pause before the first poll of a wait for every WQE written (``wait_done``, ``quiet``)
# that every QueueSet gets unless told (device verbs I_POLL_DELAY_NS; waits for space poll
# at once). The poll is a chain of PCIe reads of host memory, each a
# round trip of about 1.2 us on an H100; a read sent at once after a doorbell reaches host
# memory before the emulated NIC has answered (its turnaround, doorbell seen to CQE
# written, is 0.12 to 0.25 us) and the answer then waits for the next read. In 19 runs of
# `gpuwrite bench` on H100 and H200 hosts (sessions 9 to 22, BENCHMARKS.md), a 64-byte
# gpu_push took 4.35 to 4.86 us polling at once (3.26 in a few runs), 3.26 to 4.86 with a
# 100 ns pause (both modes), 3.36 to 3.55 with 200 ns in every run but one, and 3.46 to
# 3.65 with 300 ns in every run; each 100 ns more added about 0.1 us. On session 23's
# second host (engine turnaround 0.20 us) 200 ns still gave both modes (3.46 to 3.52 us
# in 5 runs of 9, 4.70 to 4.74 in the others) and 300 ns 3.58: 300 ns leaves that margin.
# A pause costs a wait at most its length where the answer is already there; the newest
# WQE's completion never is, so only those waits take it (300 ns before every wait, for
# space too, took the 64-byte rate from 37-68 to 23-39 M/s on one host); 0 polls at once.
# Since session 27 it is where a QueueSet's pause starts (``poll_adapt``, the default): the
# pause then follows where the completions land (device verbs ``next_poll_adj``).
DEFAULT_POLL_DELAY_NS = 300


def process_cpus() -> list[int]:
    """The CPUs this process may run on, in ascending order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


# The most copy helpers a context gets unless told. Six from session 7 (a 1 MiB delivery
# in 23 us, about 45 GB/s) to session 28; on the 16-CPU H100 hosts twelve delivered 1 MiB
# messages about 15 % sooner and 256 KiB about 10 % sooner by the medians, one message in
# flight (1 MiB gpu_push with 256 threads: p50 42.7 to 46.7 us against 50.9 to 59.8; 256
# KiB 13.8 to 15.4 against 16.6 to 18.0), and 64 KiB 0.2 us later (BENCHMARKS.md, session
# 29).
MAX_DEFAULT_COPY_THREADS = 12


def copy_threads_for(ncpus: int, workers: int) -> int:
    """The copy helpers a context of ``workers`` gets on ``ncpus`` CPUs: what the CPUs
    leave after the workers and HOST_THREADS, at most MAX_DEFAULT_COPY_THREADS."""
    return max(0, min(MAX_DEFAULT_COPY_THREADS, ncpus - workers - HOST_THREADS))


def default_copy_threads(workers: int) -> int:
    """Copy helpers a context gets unless told: none on the CUDA simulator (its timings
    are Python's), else ``copy_threads_for`` this process's CPUs."""
    if SIMULATOR:
        return 0
    return copy_threads_for(len(process_cpus()), workers)


def engine_thread_cpus(workers: int, copy_threads: int, pin=False) -> tuple[int, ...]:
    """The CPU of each engine thread, its workers' first and then its copy helpers', or
    () where the scheduler places them.

    ``pin``: ``False`` (the default) leaves them to the scheduler; ``True`` gives each
    engine thread a CPU of its own, the highest of :func:`process_cpus` (the lowest, where
    the host thread starts and interrupts tend to land, stay free), or a ValueError
    where there are too few; a sequence of CPUs pins to those, in order (for example
    the CPUs of the GPU's NUMA node). Not the default: two processes that pin by the same
    rule (two ranks on one host, a test runner's workers) would put their engine threads
    on the same CPUs, and on the project's H100 hosts pinning left the 64-byte rate,
    Fig. 4's throughput and latency and the 64-byte push's latency where they were
    (BENCHMARKS.md, session 18)."""
    threads = workers + copy_threads
    cpus = process_cpus()
    if isinstance(pin, bool):
        if not pin:
            return ()
        if threads > len(cpus):
            raise ValueError(f"pin_threads=True: {workers} worker(s) and {copy_threads} copy "
                             f"helper(s) need {threads} CPUs of their own; this process may "
                             f"run on {len(cpus)} ({_cpu_list(cpus)})")
        return tuple(reversed(cpus[-threads:]))
    try:
        chosen = tuple(operator.index(c) for c in pin)
    except TypeError:
        raise ValueError(f"pin_threads={pin!r}: allowed True, False or a sequence of CPU "
                         "numbers") from None
    allowed = set(cpus)
    wrong = [c for c in chosen if c not in allowed]
    if wrong or len(set(chosen)) != len(chosen) or len(chosen) < threads:
        raise ValueError(f"pin_threads={list(chosen)}: give {threads} distinct CPUs (one for "
                         f"each of {workers} worker(s) and {copy_threads} copy helper(s)) "
                         f"from this process's {_cpu_list(cpus)}"
                         + (f"; not among them: {wrong}" if wrong else ""))
    return chosen[:threads]


def _cpu_list(cpus: list[int]) -> str:
    """``cpus`` as ranges, the way /proc and taskset write them (0-3,8)."""
    runs, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            runs.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(runs) or "none"


# The smallest delivery the engine's copy helpers split (Context(copy_split_bytes=...));
# each piece is at least a quarter of it.
COPY_SPLIT_BYTES = lib.GW_COPY_SPLIT_DEFAULT

# Engine threads one context may run (the engine's own limit).
MAX_WORKERS = lib.GW_MAX_WORKERS


def last_level_cache_bytes() -> int:
    """The size of this host's L3 cache in bytes (as the OS reports it, in a VM the
    hypervisor's figure), or 0 where it says none."""
    try:
        size = os.sysconf("SC_LEVEL3_CACHE_SIZE")
    except (ValueError, OSError, AttributeError):
        size = 0
    if size and size > 0:
        return int(size)
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
    except OSError:
        return 0
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
    except (ValueError, IndexError):
        return 0


def default_cached_dst_max_bytes() -> int:
    """The largest destination region whose mid-size deliveries the engine stores through
    the cache unless told (``Context(cached_dst_max_bytes=...)``): an eighth of the L3,
    which leaves room for the staging rings, the GPU's writes into them and whatever else
    the host runs; 0 (stream them all, as before session 28) where the L3 is unknown."""
    return last_level_cache_bytes() // 8


class Context:
    """An opened NIC: the software engine of emulated mode.

    ``policy`` is ``"hold"`` (pushed data waits in the staging region for link credits;
    the GPU is back-pressured through staging credits, so nothing is lost) or ``"drop"``
    (the naive design: pushed data that finds no credits is dropped and counted).
    ``workers`` engine threads share the QPs (by CQ); a modelled link needs one.
    ``copy_threads`` helper threads split each delivery of ``copy_split_bytes`` or more
    (default ``COPY_SPLIT_BYTES``, 32 KiB) with the worker that copies it (csrc/gw_copy.h):
    one CPU thread copies host memory at about a fifth of a 400 Gb/s link, the step the
    copy stands in for; the counter ``copies_split`` says how many were split,
    ``copy_pieces`` how many pieces of them went to helpers, ``copy_pieces_late`` how many
    of those the worker copied itself (their helper had not claimed them yet) and
    ``copy_wait_ns`` how long the worker waited, its own piece done, for the rest. On the
    project's H100 hosts a split below 32 KiB cost more than it saved (1.3 to 1.5 us
    with the pool of session 25; with the pool of session 27, a line per piece, 8 KiB
    still 1 us and 16 KiB level; BENCHMARKS.md). ``None`` picks
    ``default_copy_threads(workers)``.
    ``pin_threads`` confines each engine thread to a CPU of its own
    (:func:`engine_thread_cpus`; ``thread_cpus`` says which, () where unpinned).
    Deliveries of 4 KiB or more are streamed into their destination (non-temporal stores)
    unless they are below 32 KiB, not split, and their region is at most
    ``cached_dst_max_bytes`` long: those are stored through the cache, where the lines of a
    region that small most likely are (counter ``copies_cached``). ``None`` picks
    :func:`default_cached_dst_max_bytes`, an eighth of the L3; 0 streams them all.
    """

    def __init__(self, policy: str = "hold", link: LinkConfig | None = None, workers: int = 1,
                 max_qps: int = 4096, max_mrs: int = 4096, idle_sleep_ns: int = 0,
                 copy_threads: int | None = None, pin_threads=False,
                 copy_split_bytes: int | None = None, cached_dst_max_bytes: int | None = None):
        if policy not in POLICIES:
            raise ValueError(f"policy={policy!r}: allowed {sorted(POLICIES)}")
        if link is not None and not isinstance(link, LinkConfig):
            raise TypeError(f"link={link!r}: give a LinkConfig")
        workers = _int_in("workers", workers, 1, MAX_WORKERS, " engine threads")
        max_qps = _int_in("max_qps", max_qps, 1, lib.GW_MAX_QPS)
        max_mrs = _int_in("max_mrs", max_mrs, 2, lib.GW_MAX_MRS,
                          " (key index 0 is never used)")
        idle_sleep_ns = _int_in("idle_sleep_ns", idle_sleep_ns, 0, 999_999_999,
                                " (0: spin without sleeping)")
        if copy_threads is None:
            copy_threads = default_copy_threads(workers)
        copy_threads = _int_in("copy_threads", copy_threads, 0, lib.GW_MAX_COPY_THREADS,
                               " helper threads (0: each worker copies alone)")
        if copy_split_bytes is None:
            copy_split_bytes = COPY_SPLIT_BYTES
        copy_split_bytes = _int_in("copy_split_bytes", copy_split_bytes, lib.GW_COPY_SPLIT_MIN,
                                   lib.GW_COPY_SPLIT_MAX, " (the smallest delivery the copy "
                                   "helpers split)")
        if cached_dst_max_bytes is None:
            cached_dst_max_bytes = default_cached_dst_max_bytes()
        cached_dst_max_bytes = _int_in("cached_dst_max_bytes", cached_dst_max_bytes, 0, 1 << 62,
                                       " (the largest destination region whose deliveries of "
                                       f"{lib.GW_COPY_STREAM_MIN >> 10} KiB to under "
                                       f"{lib.GW_CACHED_COPY_MAX >> 10} KiB are stored through "
                                       "the cache; 0: none)")
        self.copy_threads = copy_threads
        self.copy_split_bytes = copy_split_bytes
        self.cached_dst_max_bytes = cached_dst_max_bytes
        self.thread_cpus = engine_thread_cpus(workers, copy_threads, pin_threads)
        self.policy = policy
        self.link = link or LinkConfig()
        self.workers = workers
        cfg = ffi.new("struct gw_engine_config *")
        cfg.policy = POLICIES[policy]
        cfg.workers = workers
        cfg.max_qps = max_qps
        cfg.max_cqs = max_qps + 1    # CQ numbers run from 1 (0 is never handed out)
        cfg.max_mrs = max_mrs
        cfg.idle_sleep_ns = idle_sleep_ns
        cfg.copy_threads = copy_threads
        cfg.copy_split_bytes = copy_split_bytes
        cfg.cached_dst_max_bytes = cached_dst_max_bytes
        cfg.pin_threads = bool(self.thread_cpus)
        for i, cpu in enumerate(self.thread_cpus):
            cfg.thread_cpu[i] = cpu
        for key, value in asdict(self.link).items():
            setattr(cfg.link, key, value)
        self._libcuda = ffi.new("char[]", b"libcuda.so.1")
        if not SIMULATOR and lazy_loading():
            warnings.warn("CUDA loads modules lazily here (CUDA_MODULE_LOADING=LAZY): a kernel "
                          "that spins while the engine pulls or another kernel loads can wait "
                          "until its timeout; set CUDA_MODULE_LOADING=EAGER before CUDA starts",
                          RuntimeWarning, stacklevel=2)
        if not SIMULATOR:
            check_capability()
            cfg.cuda_context = ffi.cast("void *", _cuda_context_handle())
            cfg.libcuda_path = self._libcuda
        err = ffi.new("char[]", _ERRLEN)
        ptr = lib.gw_engine_create(cfg, err, _ERRLEN)
        if ptr == ffi.NULL:
            raise VerbsError(ffi.string(err).decode())
        self._eng = _Engine(ptr)
        self._finalizer = weakref.finalize(self, self._eng.destroy)
        self._pdn = itertools.count(1)
        self._max_mrs = max_mrs
        # Key indices and CQ numbers come back when the engine has let go of them; a
        # reused key index gets the next variant byte, so a stale key never matches
        # the new region (as a NIC's mkey variant does).
        self._key_indices = _NumberPool(1, max_mrs)
        self._key_variant: dict[int, int] = {}
        self._qpn = itertools.count(0x100)
        self._cqns = _NumberPool(1, max_qps + 1)
        # Each context's keys start at its own random variants, as two NICs' (or two
        # openings of one) do: a key of another context must not match here.
        self._rng = random.Random()
        self._keep = []          # queue sets live as long as the context, as before
        self.max_qps = max_qps

    @property
    def closed(self) -> bool:
        return self._eng.ptr is None

    @property
    def _engine(self):
        """The engine pointer, for a single call from the thread that owns the context
        (tests); gpuwrite's own calls hold it through ``_eng.use()``."""
        ptr = self._eng.ptr
        if ptr is None:
            raise VerbsError(_CLOSED)
        return ptr

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> "Context":
        err = ffi.new("char[]", _ERRLEN)
        with self._eng.use() as engine:
            _check(lib.gw_engine_start(engine, err, _ERRLEN), err)
        return self

    def stop(self) -> None:
        with self._eng.use() as engine:
            lib.gw_engine_stop(engine)

    @property
    def running(self) -> bool:
        with self._eng.use() as engine:
            return bool(lib.gw_engine_running(engine))

    def poll(self, passes: int = 1) -> bool:
        """Runs engine passes in this thread (engine not started): for tests."""
        passes = _int_in("passes", passes, 0, U32_MAX)
        with self._eng.use() as engine:
            rc = lib.gw_engine_poll(engine, passes)
        if rc < 0:
            raise VerbsError("poll() needs a stopped engine; this one is running")
        return bool(rc)

    def close(self) -> None:
        """Stops and destroys the engine, then releases every pinned buffer (idempotent).
        WQEs still posted complete flushed (``wr_flush_err``), as on a NIC whose queues
        are destroyed; a call into the engine in flight in another thread finishes first,
        and later ones raise VerbsError."""
        self._finalizer()
        self._keep.clear()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- observation and control -------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """Every engine counter, read now (see struct gw_counters in csrc/gw_engine.h)."""
        c = ffi.new("struct gw_counters *")
        with self._eng.use() as engine:
            lib.gw_engine_read_counters(engine, c)
        return {name: int(getattr(c, name)) for name in L.COUNTERS.names}

    def stall_receiver(self, stalled: bool = True) -> None:
        """Stops (or resumes) the remote receiver draining the link's buffer."""
        with self._eng.use() as engine:
            lib.gw_engine_set_receiver_stall(engine, 1 if stalled else 0)

    def alloc_pd(self) -> "ProtectionDomain":
        return ProtectionDomain(self)

    # -- internals used by PD and QueueSet ----------------------------------------------
    def _new_key(self) -> int:
        if not self._key_indices.free():
            raise VerbsError(f"out of memory-region keys: max_mrs={self._max_mrs} regions, "
                             "all registered")
        index = self._key_indices.take()
        last = self._key_variant.get(index)
        variant = self._rng.randrange(256) if last is None else (last + 1) & 0xFF
        self._key_variant[index] = variant
        return index << 8 | variant

    def _free_key(self, key: int) -> None:
        self._key_indices.give(key >> 8)

    def _take_cqns(self, n: int) -> list[int]:
        if n > self._cqns.free():
            raise VerbsError(f"{n} completion queues asked for, {self._cqns.free()} left of "
                             f"max_qps={self.max_qps}")
        return [self._cqns.take() for _ in range(n)]

    def _give_cqns(self, cqns) -> None:
        for cqn in cqns:
            self._cqns.give(cqn)


class MemoryRegion:
    """A registered buffer: [address, address + length) with keys and access rights."""

    def __init__(self, pd: "ProtectionDomain", buffer, access: int, kind: int | None = None):
        pd._check_open()
        access = _int_in("access", access, 0, U32_MAX)
        if access & ~lib.GW_ACCESS_ALL:
            raise ValueError(f"access=0x{access:x} has unknown bits 0x{access & ~lib.GW_ACCESS_ALL:x}"
                             ": allowed an OR of ACCESS_LOCAL_WRITE (1), ACCESS_REMOTE_WRITE (2), "
                             "ACCESS_REMOTE_READ (4)")
        if access & L.ACCESS_REMOTE_WRITE and not access & L.ACCESS_LOCAL_WRITE:
            # ibv_reg_mr refuses it too (EINVAL): a region others may write, its owner
            # must be allowed to write as well
            raise ValueError(f"access=0x{access:x}: ACCESS_REMOTE_WRITE needs ACCESS_LOCAL_WRITE "
                             "as well (ibv_reg_mr's rule)")
        if kind is not None:
            kind = _int_in("kind", kind, L.MEM_HOST, L.MEM_STAGING,
                           " (host 0, device 1, staging 2)")
        addr, nbytes, detected, writeable = describe(buffer)
        if nbytes == 0:
            raise ValueError("a memory region of 0 bytes: register a buffer of at least 1 byte")
        if not writeable and access & (L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE):
            # the NIC would write into memory its owner made read-only (a read-only
            # memmap faults the process; a bytes object changes under Python)
            raise ValueError(f"access=0x{access:x} asks for write access to a read-only "
                             f"{type(buffer).__name__}: register a writeable buffer, or give "
                             "access=0 (a source the NIC only reads)")
        if kind in (L.MEM_HOST, L.MEM_STAGING) and detected == L.MEM_DEVICE \
                and not cpu_reaches(addr):
            # the engine's threads copy host and staging regions with the CPU, and a CPU
            # access to GPU memory faults the process
            raise ValueError(f"kind={kind} ({'host' if kind == L.MEM_HOST else 'staging'}) for "
                             f"[0x{addr:x}, +{nbytes}), which is GPU memory the CPU cannot "
                             "reach: leave kind unset (device), or register host memory")
        self.buffer = buffer
        self.address = addr
        self.length = nbytes
        self.access = access
        self.kind = detected if kind is None else kind
        reached = self.kind != L.MEM_STAGING and gpu_reaches(addr, nbytes)
        if self.kind == L.MEM_DEVICE and not reached:
            # The pull agent would load from it, and a load the GPU has no mapping for
            # ends the CUDA context.
            raise ValueError(f"kind=device (1) for [0x{addr:x}, +{nbytes}), which the GPU "
                             "does not map: register GPU memory (an object with "
                             "__cuda_array_interface__) or mapped host memory "
                             "(gpuwrite.host.memory.mapped), or host memory as kind=host (0)")
        # Whether the pull agent may write here (host memory the GPU can store into).
        self.gpu_mapped = self.kind == L.MEM_HOST and reached
        flags = lib.GW_MR_GPU_MAPPED if self.gpu_mapped else 0
        self.key = pd.context._new_key()
        self._pd = None
        err = ffi.new("char[]", _ERRLEN)
        with pd.context._eng.use() as engine:
            rc = lib.gw_engine_add_mr(engine, self.key, addr, nbytes, access, self.kind, flags,
                                      pd.number, err, _ERRLEN)
        if rc != 0:
            pd.context._free_key(self.key)
            raise VerbsError(ffi.string(err).decode())
        self._pd = pd
        # The registration, not this object, keeps the buffer alive: until deregistration
        # returns (or the context is closed or collected).
        pd.context._eng.pins[("mr", self.key)] = buffer

    @property
    def lkey(self) -> int:
        return self.key

    @property
    def rkey(self) -> int:
        return self.key

    def deregister(self) -> None:
        """Returns once the engine can no longer touch the region; WQEs still aimed at it
        complete with a protection error (reason rkey_invalidated / lkey_invalidated).
        Where the GPU pull agent still owes a timed-out pull into the region, its buffer
        is kept for the life of the process instead (a RuntimeWarning says so)."""
        pd, self._pd = self._pd, None
        if pd is None:
            return
        with contextlib.suppress(ValueError):
            pd.mrs.remove(self)     # a deregistered region is the domain's no longer
        eng = pd.context._eng
        try:
            with eng.use() as engine:
                rc = lib.gw_engine_remove_mr(engine, self.key)
        except VerbsError:
            return                  # the context is closed: the engine let go of everything
        if rc == -2:
            raise VerbsError(f"region key 0x{self.key:x}: the engine did not let go of it in "
                             "10 s; its buffer stays pinned until the context is closed")
        pinned = eng.pins.pop(("mr", self.key), None)
        if rc == -3:
            _keep_for_late_pulls([pinned], f"region key 0x{self.key:x}")
        if rc == 0:
            pd.context._free_key(self.key)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.deregister()


class ProtectionDomain:
    """Groups the memory regions and queues of one user of the NIC: a WQE's local
    segments must name regions of its QP's domain (else a local protection error,
    ``bad_lkey``), as on a NIC. The emulated NIC's remote side is itself, with no
    responder QP, so remote keys are checked against every domain of the context."""

    def __init__(self, context: Context):
        context._engine     # a closed context says so before anything else
        self.context = context
        self.number = next(context._pdn)
        self.mrs: list[MemoryRegion] = []
        self.closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise VerbsError(f"protection domain {self.number} is closed: allocate a new one "
                             "(Context.alloc_pd)")
        self.context._engine    # likewise a closed context

    def reg_mr(self, buffer, access: int = L.ACCESS_LOCAL_WRITE | L.ACCESS_REMOTE_WRITE,
               kind: int | None = None) -> MemoryRegion:
        """Registers a buffer (numpy, mapped, CuPy, anything with __cuda_array_interface__)."""
        mr = MemoryRegion(self, buffer, access, kind)
        self.mrs.append(mr)
        return mr

    def create_queues(self, n_qps: int, **kwargs) -> "QueueSet":
        self._check_open()
        return QueueSet(self, n_qps, **kwargs)

    def close(self) -> None:
        """Deregisters every region of the domain (idempotent); no region or queue can be
        made in it afterwards."""
        self.closed = True
        for mr in list(self.mrs):
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
# The default is the real NIC's way. With "status", a push whose known room runs out reads
# the status line, a PCIe round trip before its doorbell: with one message in flight and a
# ring of four messages (runner.run's), every fourth message of 4 KiB or more took 1.2 us
# longer, a step at the 75th percentile of Fig. 5's 4 KiB gpu_push CDF that no NIC makes
# (H100, BENCHMARKS.md, session 28). With "completions" the wait for a message's own
# completion brings its credits; rate, bandwidth and latency measured level otherwise
# (runs 23 to 25).
DEFAULT_STAGE_CREDITS = "completions"


class QueueSet:
    """``n_qps`` queue pairs, each with its own CQ, staging ring and host bounce ring.

    Rings are rows of one allocation per kind: SQ ring, doorbell record, doorbell
    register, NIC status line, CQ ring, CQ doorbell record, staging ring, bounce ring
    (all GPU-visible host memory), and the GPU-side state and WQE bookkeeping (GPU
    memory). Row ``i`` is QP ``i``; ``qpns[i]`` is its number on the NIC.

    A wait for every WQE written pauses ``poll_delay_ns`` before its first completion
    poll; with ``poll_adapt`` (the default) that pause then follows the completions, 16 ns
    shorter after a wait whose first poll found its completion and 64 ns longer after one
    whose first poll did not (device verbs ``next_poll_adj``), so that it settles where
    this QP's completions land; ``poll_adapt=False`` keeps it fixed.
    """

    def __init__(self, pd: ProtectionDomain, n_qps: int, sq_bbs: int = 256, ncqe: int = 256,
                 stage_slots: int = 256, stage_slot_bytes: int = 256, bounce_bytes: int = 64 * 1024,
                 stage_credits: str = DEFAULT_STAGE_CREDITS,
                 poll_delay_ns: int = DEFAULT_POLL_DELAY_NS, poll_adapt: bool = True):
        ctx = pd.context
        ctx._engine   # a closed context says so before anything else
        if stage_credits not in STAGE_CREDITS:
            raise ValueError(f"stage_credits={stage_credits!r}: allowed {', '.join(STAGE_CREDITS)}")
        poll_delay_ns = _int_in("poll_delay_ns", poll_delay_ns, 0, 100_000,
                                " ns (a pause before a completion wait's first poll, device "
                                "verbs I_POLL_DELAY_NS)")
        if not isinstance(poll_adapt, (bool, np.bool_)):
            raise ValueError(f"poll_adapt={poll_adapt!r}: allowed True (the pause before a "
                             "wait's first poll follows the completions, starting at "
                             "poll_delay_ns) or False (it stays poll_delay_ns)")
        self.poll_adapt = bool(poll_adapt)
        n_qps = _int_in("n_qps", n_qps, 1, ctx.max_qps, f" (max_qps={ctx.max_qps})")
        # the checked values, as Python ints (a numpy integer has no bit_length)
        sq_bbs = _pow2("sq_bbs", sq_bbs, 16, 32768)
        ncqe = _pow2("ncqe", ncqe, 16, lib.GW_MAX_CQE)
        if ncqe < sq_bbs:
            raise ValueError(f"ncqe={ncqe} must be at least sq_bbs={sq_bbs}: every WQE may "
                             "complete with an error CQE")
        # Powers of two: the device verbs find slots with shifts, not 64-bit divisions.
        stage_slot_bytes = _pow2("stage_slot_bytes", stage_slot_bytes, 64, 1 << 20)
        stage_slots = _int_in("stage_slots", stage_slots, 1, 1 << 20)
        if stage_slots * stage_slot_bytes > 1 << 30:
            raise ValueError(f"stage_slots={stage_slots} of stage_slot_bytes={stage_slot_bytes}: "
                             "a staging ring of at most 1 GiB")
        bounce_bytes = _int_in("bounce_bytes", bounce_bytes, 64, 1 << 30)
        if bounce_bytes % 4:
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
        self._ctx_eng = None      # set once the engine holds something of this set
        self._added_qpns: list[int] = []
        self._added_cqns: list[int] = []
        self.cqns = np.array(ctx._take_cqns(n), dtype=np.int64)
        try:
            self._register(ctx, n, sq_bbs, ncqe, stage_slots, stage_slot_bytes, stage_credits,
                           poll_delay_ns)
        except BaseException:
            self._release(ctx, ctx._eng)   # what the failed call took is given back
            raise
        ctx._keep.append(self)

    def _register(self, ctx, n, sq_bbs, ncqe, stage_slots, stage_slot_bytes, stage_credits,
                  poll_delay_ns) -> None:
        pd = self.pd
        self._ctx_eng = ctx._eng
        # The rings stay pinned in the engine handle until the engine has let go of them.
        ctx._eng.pins[("queues", id(self))] = (self.sq, self.dbrec, self.status, self.cq,
                                                self.cqdb, self.stage, self.bounce)
        self.stage_mr = pd.reg_mr(self.stage, access=L.ACCESS_LOCAL_WRITE, kind=L.MEM_STAGING)
        self.bounce_mr = pd.reg_mr(self.bounce, access=L.ACCESS_LOCAL_WRITE)
        self.qpns = np.array([next(ctx._qpn) for _ in range(n)], dtype=np.int64)
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
        info[:, dv.I_POLL_ADAPT] = int(self.poll_adapt)
        self.stage_credits = stage_credits
        self.info_host = info
        self.info = cuda.to_device(info)
        self.state = device_zeros((n, dv.S_COLS), np.int64)
        self.wqe_aux = device_zeros((n, sq_bbs), np.int64)
        err = ffi.new("char[]", _ERRLEN)
        with ctx._eng.use() as engine:
            for i in range(n):
                self._add_qp(engine, i, sq_bbs, ncqe, stage_slots, stage_slot_bytes,
                             stage_credits, info, err)

    def _add_qp(self, engine, i, sq_bbs, ncqe, stage_slots, stage_slot_bytes, stage_credits,
                info, err) -> None:
        """Gives the engine QP ``i`` and its CQ."""
        cq = ffi.new("struct gw_cq_desc *")
        cq.cqn = int(self.cqns[i])
        cq.ncqe = ncqe
        cq.cqes = ffi.cast("void *", self.cq.address + i * self.cq.host[0].nbytes)
        cq.dbrec = ffi.cast("void *", self.cqdb.address + i * self.cqdb.host[0].nbytes)
        _check(lib.gw_engine_add_cq(engine, cq, err, _ERRLEN), err)
        self._added_cqns.append(int(self.cqns[i]))
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
        qp.pd = self.pd.number
        if stage_credits == "completions":
            qp.flags = lib.GW_QP_F_STAGE_CREDITS_IN_CQE
        _check(lib.gw_engine_add_qp(engine, qp, err, _ERRLEN), err)
        self._added_qpns.append(int(self.qpns[i]))

    def _release(self, ctx, eng) -> None:
        """Destroys what the engine holds of this set (its QPs flushed, then gone), then
        gives back the CQ numbers and unpins the rings."""
        stuck, released = [], False
        with contextlib.suppress(VerbsError):     # closed: the engine let go of them
            with eng.use() as engine:
                for qpn in self._added_qpns:
                    if lib.gw_engine_remove_qp(engine, qpn) == -2:
                        stuck.append(qpn)
                for cqn in self._added_cqns:
                    lib.gw_engine_remove_cq(engine, cqn)
                released = True
        self._added_qpns = []
        self._added_cqns = []
        for mr in (getattr(self, "stage_mr", None), getattr(self, "bounce_mr", None)):
            if mr is not None:
                mr.deregister()
        if released and not stuck:
            ctx._give_cqns(self.cqns)
        if stuck:
            raise VerbsError(f"queue pairs {stuck}: the engine did not let go of them in 10 s; "
                             "their rings stay pinned until the context is closed")
        eng.pins.pop(("queues", id(self)), None)

    @property
    def device_args(self) -> tuple:
        """The tuple ``Q`` that kernels pass to the device verbs (order: verbs.Q_*)."""
        return (self.sq.kernel, self.dbrec.kernel, self.uar.kernel, self.status.kernel,
                self.cq.kernel, self.cqdb.kernel, self.stage.kernel, self.state, self.info,
                self.wqe_aux, self.bounce.kernel)

    def qp_index(self, i) -> int:
        """``i`` as the index of one of this set's QPs, or a ValueError naming it."""
        return _int_in("qp", i, 0, self.n_qps - 1, f" (this set has {self.n_qps} QP(s))")

    def qp_state(self, i: int) -> str:
        value = int(self.status.host[self.qp_index(i), L.STATUS_W_QP_STATE])
        return {L.QPS_RTS: "rts", L.QPS_ERR: "error"}.get(value, f"state {value}")

    def gpu_state(self) -> np.ndarray:
        """The GPU-side QP state rows (columns verbs.S_*), copied to the host."""
        return self.state.copy_to_host()

    def reset(self, i: int) -> None:
        """Takes QP ``i`` from the error state back to ready-to-send (no kernel may run).

        Like a modify-QP through RESET to RTS: both sides' send-queue, staging and
        bounce counters restart from zero; completion-queue counters carry on.
        """
        i = self.qp_index(i)
        if self._ctx_eng is None:
            raise VerbsError(f"qp {int(self.qpns[i])}: this queue set is closed")
        self.pd.context._engine     # a closed context says so before any state changes
        state = self.state.copy_to_host()
        keep = state[i, [dv.S_CQ_CI, dv.S_CQ_PUB]]
        state[i] = 0
        state[i, [dv.S_CQ_CI, dv.S_CQ_PUB]] = keep
        self.state.copy_to_device(state)
        with self.pd.context._eng.use() as engine:
            rc = lib.gw_engine_qp_reset(engine, int(self.qpns[i]))
        if rc != 0:
            raise VerbsError(f"the engine did not reset qp {int(self.qpns[i])} (rc={rc})")
        self.dbrec.host[i] = 0     # the engine cleared the send counter; the rest too

    def close(self) -> None:
        """Destroys the queue pairs (as ibv_destroy_qp after moving them to error): WQEs
        posted and not yet completed get flush completions (``wr_flush_err``), and the
        engine never reads these rings again, so WQEs posted later never complete."""
        eng, self._ctx_eng = self._ctx_eng, None
        if eng is None:
            return
        ctx = self.pd.context
        self._release(ctx, eng)
        if self in ctx._keep:
            ctx._keep.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
