"""A kernel written with put + quiet against ``send_messages``, in the same run, and the
all-to-all's time per path.

Targets (issue 15), gpu_push, each a ratio of the put kernel to ``send_messages``
(``gpuwrite.paths.runner.run``) measured in the same process, runs interleaved:
  * 64-byte latency, post to completion seen by the kernel, one QP, one message in
    flight: put kernel p50 <= 1.05 x send_messages p50 (nine runs each); the kernel
    names its path as a constant, as a kernel of one's own does, and the same kernel
    with the path an argument is reported beside it;
  * 1 MiB bandwidth, 128 QPs, 64 KiB WQEs, the configuration of ``gpuwrite bench``
    (``gpuwrite.bench.suite.BANDWIDTH_RUN``): >= 0.95 x (six runs each);
  * 64-byte message rate, 256 QPs of one warp, a doorbell every 16 messages:
    >= 0.95 x (six runs each).
Run k of the put kernel is compared with run k of send_messages; a target is met only
if every pair meets it. A pair's runs go in turn, their order rotating so that each
kernel runs first, second and third equally often (``PAIR_ORDERS``). Each kernel's runs
on one host spread by about as much as the target allows (BENCHMARKS.md, session 17), so
each measure also gets a distribution-free 95 % interval for its median pair ratio and
says whether the API's cost is within the target beyond that noise
(``median_ratio_verdict``: within, outside or undecided), and a control: send_messages run
a second time in each pair and judged against its first run by the same target
(``control``), so a reader sees how often identical kernels miss it on that host. The control judges nothing; it says how much a missed pair can mean.
And the all-to-all (``experiments.apps.alltoall``) per path, with its ratio to the
bytes moved over the bulk-store bandwidth measured in the same run.

    python3 -m experiments.apps.bench --out put_api_bench.json     # on a GPU, ~5 minutes
    python3 -m experiments.apps.bench --out rate.json --measures rate --pairs 18

(On an H100, session 32: rate 55 s, bandwidth 75 s, latency 45 s, all-to-all 130 s, most
of each the kernels' compiles. ``--measures`` picks and orders them; the file is written
after each, so a bench cut short keeps those done. ``--pairs`` runs more pairs where runs
spread: the median pair ratio's interval narrows with them.)

On the CUDA simulator ``--toy`` runs every step at toy sizes (what CI checks); its
timings are a Python interpreter's.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time

import numpy as np
from numba import int64

from experiments.apps import alltoall, common
from gpuwrite.bench import hostload, suite
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device import api
from gpuwrite.device.intrinsics import globaltimer_ns
from gpuwrite.experiments import store
from gpuwrite.kernel_cache import cached
from gpuwrite.paths import runner

TARGET_LATENCY_RATIO_MAX = 1.05
TARGET_BANDWIDTH_RATIO_MIN = 0.95
TARGET_RATE_RATIO_MIN = 0.95
LATENCY_PAIRS = 9
STREAM_PAIRS = 6
SLOT1 = api.slots_shape(1)
# The rings runner.run gives 64-byte messages (64 staging slots of 256 B, a 64 KiB bounce
# ring): a larger staging ring spreads the engine's reads over more memory.
SMALL_RINGS = dict(sq_bbs=256, stage_slots=64, stage_slot_bytes=256, bounce_bytes=65536)
# Kernel parameters: destination address, rkey, source lkey, message bytes, messages per
# QP, doorbell batch.
B_DST, B_RKEY, B_LKEY, B_BYTES, B_PER_QP, B_BATCH = range(6)


@cuda.jit(device=True, inline=True)
def _params(prm):
    """(message bytes, destination address, rkey, lkey, messages per QP) from ``prm``."""
    return prm[B_BYTES], prm[B_DST], prm[B_RKEY], prm[B_LKEY], prm[B_PER_QP]


@cuda.jit(device=True)
def _latency_loop(Q, cfg, src, prm, path, thread_scope, t_ns, status):
    """One warp, QP 0: each message is put, then quieted; t_ns[m] = post to completion.
    With ``thread_scope`` (a compile-time constant) lane 0 alone opens the QP
    (``api.open_thread``) and the other lanes leave, as send_messages' kernel for tables
    of one-thread messages has them do (session 40)."""
    sh = cuda.shared.array(SLOT1, int64)
    if thread_scope:
        if cuda.threadIdx.x != 0:
            return
        h = api.open_thread(Q, cfg, 0, sh, 0)
    else:
        h = api.open_warp(Q, cfg, 0, sh)
    # The parameters are in registers before the clock starts, as send_messages starts a
    # message's clock once its row of the table is loaded: every completion wait's
    # system-scope acquire loads empty the L1 cache, so a load of prm inside the clock is
    # a trip to L2 per message (0.2 to 0.4 us on an H100, BENCHMARKS.md session 9).
    nbytes, dst, rkey, lkey, per_qp = _params(prm)
    words = (nbytes + 3) // 4
    st = api.OK
    m = 0
    while m < per_qp and st == api.OK:
        t0 = globaltimer_ns()
        st = api.put(h, src, m * words, nbytes, dst + m * words * 4, rkey, lkey, path)
        if st == api.OK:
            st = api.quiet(h)
        if cuda.threadIdx.x == 0:
            t_ns[m] = globaltimer_ns() - t0
        m += 1
    api.close(h)
    if cuda.threadIdx.x == 0:
        status[0] = st


@cached
@cuda.jit(**api.KERNEL_OPTIONS)
def put_latency(Q, cfg, src, prm, path, t_ns, status):
    """The latency loop with ``path`` a kernel argument: every path's code is compiled in
    (``put`` holds one copy of its post per path)."""
    _latency_loop(Q, cfg, src, prm, path, False, t_ns, status)


_LATENCY_KERNELS: dict = {}


def put_latency_kernel(path_id: int, thread_scope: bool = False):
    """The latency loop with ``path`` a compile-time constant, as a kernel of one's own
    names its path (``api.GPU_PUSH``): the compiler drops the other paths' code. Since
    ``put`` holds one copy of its post per path, a path that is a kernel argument costs
    one branch more (BENCHMARKS.md, session 21; 1.06 to 1.12x the time this way before,
    session 14). ``thread_scope``: lane 0 alone puts (``_latency_loop``)."""
    key = (path_id, bool(thread_scope))
    if key not in _LATENCY_KERNELS:
        @cached
        @cuda.jit(**api.KERNEL_OPTIONS)
        def put_latency_constant(Q, cfg, src, prm, t_ns, status):
            _latency_loop(Q, cfg, src, prm, path_id, thread_scope, t_ns, status)

        _LATENCY_KERNELS[key] = put_latency_constant
    return _LATENCY_KERNELS[key]


@cuda.jit(device=True, inline=True)
def _stream_loop(Q, cfg, src, prm, path, warp_scope, t_first, t_last, status):
    """Block b drives QP b (the whole block, or its one warp): its messages are put one
    after another, a doorbell every ``batch``, then one quiet."""
    sh = cuda.shared.array(SLOT1, int64)
    qp = cuda.blockIdx.x
    h = api.open_scope(Q, cfg, qp, sh, api.SCOPE_WARP if warp_scope else api.SCOPE_BLOCK)
    nbytes, dst, rkey, lkey, per_qp = _params(prm)
    batch = prm[B_BATCH]
    words = (nbytes + 3) // 4
    first = qp * per_qp
    if cuda.threadIdx.x == 0:
        t_first[qp] = globaltimer_ns()
    st = api.OK
    m = 0
    while m < per_qp and st == api.OK:
        k = first + m
        st = api.put(h, src, k * words, nbytes, dst + k * words * 4, rkey, lkey, path)
        m += 1
        if st == api.OK and m % batch == 0:
            st = api.flush(h)
    if st == api.OK:
        st = api.quiet(h)
    api.close(h)
    if cuda.threadIdx.x == 0:
        t_last[qp] = globaltimer_ns()
        status[qp] = st


@cached
@cuda.jit(**api.KERNEL_OPTIONS)
def put_stream(Q, cfg, src, prm, path, warp_scope, t_first, t_last, status):
    """The stream loop with its path and scope kernel arguments: every path's and both
    scopes' code compiled in."""
    _stream_loop(Q, cfg, src, prm, path, warp_scope, t_first, t_last, status)


_STREAM_KERNELS: dict = {}


def put_stream_kernel(path_id: int, warp_scope: bool):
    """The stream loop with its path and scope compile-time constants, as a kernel of
    one's own names them (``api.GPU_PUSH``, ``api.open_warp``), and as ``send_messages``
    is compiled for its path. The put bench's bandwidth and rate pairs run this one; until
    session 31 they ran ``put_stream``, whose run-time path and scope kept every branch."""
    key = (path_id, bool(warp_scope))
    if key not in _STREAM_KERNELS:
        @cached
        @cuda.jit(**api.KERNEL_OPTIONS)
        def put_stream_constant(Q, cfg, src, prm, t_first, t_last, status):
            _stream_loop(Q, cfg, src, prm, path_id, warp_scope, t_first, t_last, status)

        _STREAM_KERNELS[key] = put_stream_constant
    return _STREAM_KERNELS[key]


def _buffers(session: api.Session, n_msgs: int, size_bytes: int, seed: int = 7):
    words = (size_bytes + 3) // 4
    payload = np.random.default_rng(seed).integers(0, 2**32, n_msgs * words, dtype=np.uint32)
    src, smr = session.source(payload)
    dst, dmr = session.receive(n_msgs * words)
    return payload, src, smr, dst, dmr


def _delivered(payload: np.ndarray, dst, n_msgs: int) -> int:
    """Messages whose every byte arrived (whole words: the sizes here are word multiples)."""
    return int(np.all(dst.host.reshape(n_msgs, -1) == payload.reshape(n_msgs, -1), axis=1).sum())


def _prm(dmr, smr, size_bytes, per_qp, batch):
    prm = np.zeros(6, dtype=np.int64)
    prm[[B_DST, B_RKEY, B_LKEY, B_BYTES, B_PER_QP, B_BATCH]] = (
        dmr.address, dmr.rkey, smr.lkey, size_bytes, per_qp, batch)
    return cuda.to_device(prm)


def put_latency_run(n_msgs: int, size_bytes: int = 64, path: str = "gpu_push",
                    path_constant: bool = True, around_kernel=None,
                    thread_scope: bool = False) -> dict:
    """The put kernel's post-to-completion latency, one message in flight; the kernel
    names its path as a constant (``path_constant``) or takes it as an argument, and puts
    from a warp or (``thread_scope``, with the path a constant) from lane 0 alone.
    ``around_kernel``: a context entered around the launch and its end, as
    ``runner.run`` takes it (the bench samples the host's load over it)."""
    with api.Session(1, thresholds=api.Thresholds.fixed(path), **SMALL_RINGS) as s:
        payload, src, smr, dst, dmr = _buffers(s, n_msgs, size_bytes)
        t_ns = cuda.to_device(np.zeros(n_msgs, dtype=np.int64))
        status = cuda.to_device(np.full(1, 99, dtype=np.int64))
        s.start()
        prm = _prm(dmr, smr, size_bytes, n_msgs, 1)
        with _span(around_kernel):
            if path_constant:
                put_latency_kernel(api.PATH_IDS[path], thread_scope)[1, 32](
                    s.Q, s.cfg, src, prm, t_ns, status)
            else:
                put_latency[1, 32](s.Q, s.cfg, src, prm, api.PATH_IDS[path], t_ns, status)
            common.sync()
        lat = t_ns.copy_to_host()
        st = int(status.copy_to_host()[0])
        return {"p50_us": float(np.percentile(lat, 50) / 1e3),
                "p99_us": float(np.percentile(lat, 99) / 1e3),
                "delivered": _delivered(payload, dst, n_msgs), "messages": n_msgs,
                "status": api.error_name(st)}


def put_stream_run(n_qps: int, per_qp: int, size_bytes: int, *, threads: int, batch: int,
                   warp_scope: bool, path: str = "gpu_push", path_constant: bool = True,
                   around_kernel=None, **session_kwargs) -> dict:
    """The put kernel's throughput: bytes over first post to last completion. The kernel
    names its path and scope as constants (``path_constant``) or takes both as arguments;
    ``around_kernel`` as for ``put_latency_run``."""
    n_msgs = n_qps * per_qp
    with api.Session(n_qps, thresholds=api.Thresholds.fixed(path), **session_kwargs) as s:
        payload, src, smr, dst, dmr = _buffers(s, n_msgs, size_bytes)
        t_first = cuda.to_device(np.zeros(n_qps, dtype=np.int64))
        t_last = cuda.to_device(np.zeros(n_qps, dtype=np.int64))
        status = cuda.to_device(np.full(n_qps, 99, dtype=np.int64))
        s.start()
        prm = _prm(dmr, smr, size_bytes, per_qp, batch)
        with _span(around_kernel):
            if path_constant:
                put_stream_kernel(api.PATH_IDS[path], warp_scope)[n_qps, threads](
                    s.Q, s.cfg, src, prm, t_first, t_last, status)
            else:
                put_stream[n_qps, threads](s.Q, s.cfg, src, prm, api.PATH_IDS[path],
                                           warp_scope, t_first, t_last, status)
            common.sync()
        span_ns = int(t_last.copy_to_host().max() - t_first.copy_to_host().min())
        st = status.copy_to_host()
        return {"gbytes": n_msgs * size_bytes / span_ns if span_ns > 0 else 0.0,
                "mpps": n_msgs / span_ns * 1e3 if span_ns > 0 else 0.0,
                "delivered": _delivered(payload, dst, n_msgs), "messages": n_msgs,
                "errors": s.qp_errors(st),
                "engine": _engine_work(s.context.counters()) if s.context else None}


def _span(around_kernel):
    """``around_kernel()``'s context, or none."""
    return around_kernel() if around_kernel is not None else contextlib.nullcontext()


def _engine_work(counters: dict) -> dict:
    """What a run asked of the emulated NIC, per kernel: doorbells, WQEs and completions
    (CQEs), and the engine's mean turnaround. At 64-byte message rate the engine is the
    bottleneck, so a kernel that asks for more completions per message costs rate (until
    ``c587eb2`` the put kernel asked two per 16-message batch where send_messages asked
    one, on the simulator; BENCHMARKS.md session 31)."""
    return {"doorbells": counters["doorbells"], "wqes": counters["wqes"],
            "cqes": counters["cqes"], "turnaround_us": suite.mean_turnaround_us(counters)}


def _sm_stream(result: runner.PathResult) -> dict:
    return {"gbytes": result.throughput_gbps / 8, "mpps": suite.message_rate_mpps(result),
            "delivered": result.delivered, "messages": result.messages,
            "errors": result.qp_errors, "engine": _engine_work(result.counters)}


def _spread(values: list[float]) -> float:
    """Largest over smallest of one kernel's runs (1.0 for a single run; inf if one is 0)."""
    return max(values) / min(values) if min(values) > 0 else float("inf")


def _summary(runs: list[dict], key: str) -> dict:
    """One kernel's runs of a measure: its last run's fields, with ``key`` the median of
    all, every run's value, their ``spread`` and the fewest messages delivered."""
    values = [r[key] for r in runs]
    out = dict(runs[-1], **{key: common.median(values), f"runs_{key}": values,
                            "spread": _spread(values),
                            "delivered": min(r["delivered"] for r in runs)})
    if any(r.get("engine") for r in runs):
        out["runs_engine"] = [r.get("engine") for r in runs]
    return out


def median_interval(values: list[float], level: float = 0.95) -> dict:
    """A distribution-free interval for the median of ``values`` (the sign test's): the
    order statistics x_(k) and x_(n+1-k), k the largest whose coverage, 1 - 2 P(B < k)
    with B ~ Binomial(n, 1/2), is at least ``level``. With too few values for ``level``,
    k = 1 (their min to max) and the coverage that gives. (One binomial sum, written here
    rather than making SciPy a dependency for it.)"""
    x = sorted(values)
    n = len(x)

    def coverage(k: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0 ** n

    k = 1
    while 2 * (k + 1) <= n + 1 and coverage(k + 1) >= level:
        k += 1
    return {"low": x[k - 1], "high": x[n - k], "coverage": coverage(k)}


def _compare(put_runs: list[dict], sm_runs: list[dict], key: str, lower_is_better: bool,
             target: float) -> dict:
    """Run k of the put kernel against run k of send_messages (taken in turn): the ratio
    of each pair, and the target judged on every pair, not on the medians. Each kernel's
    ``spread`` (its slowest run over its fastest, in time or rate) is reported beside the
    ratios: on the H100 hosts of session 17 it was as large as the 5 % the target allows
    (BENCHMARKS.md), so a pair that misses may say more about the host than the API."""
    put, sm = _summary(put_runs, key), _summary(sm_runs, key)
    ratios = [p[key] / q[key] if q[key] else float("nan") for p, q in zip(put_runs, sm_runs)]
    runs_met = sum(1 for r in ratios if (r <= target if lower_is_better else r >= target))
    # The median pair ratio's interval says whether the API's cost is within the target
    # beyond the hosts' run-to-run noise ("within"), beyond it ("outside") or neither.
    ci = median_interval(ratios)
    good, bad = (ci["high"], ci["low"]) if lower_is_better else (ci["low"], ci["high"])
    inside = good <= target if lower_is_better else good >= target
    outside = bad > target if lower_is_better else bad < target
    return {"put": put, "send_messages": sm, "ratio": common.median(ratios), "ratios": ratios,
            "runs_met": f"{runs_met} of {len(ratios)}",
            "target": f"{'<=' if lower_is_better else '>='} {target} in every run",
            "met": runs_met == len(ratios),
            "median_ratio_interval": ci,
            "median_ratio_verdict": "within" if inside else ("outside" if outside else "undecided")}


def _control(again: list[dict], sm_runs: list[dict], key: str, lower_is_better: bool,
              target: float) -> dict:
    """send_messages' second run of each pair against its first, judged as the put kernel
    is: the same target missed by the same code is the host's noise."""
    c = _compare(again, sm_runs, key, lower_is_better, target)
    return {k: c[k] for k in ("ratio", "ratios", "runs_met", "median_ratio_interval")}


# The order of a pair's three runs, turn by turn: each of them first, second and third
# equally often over three pairs. Until session 30 the put kernel always ran first; in
# that session's rate pairs it ran below send_messages (second) in 6 of 6 and
# send_messages' second run (third) below its first in 4 of 6 (BENCHMARKS.md): where a
# triple's place moves the rate, a fixed order puts that on one kernel.
PAIR_ORDERS = (("put", "send_messages", "send_messages_again"),
               ("send_messages", "send_messages_again", "put"),
               ("send_messages_again", "put", "send_messages"))


def _paired(reps: int, label: str, step, put_run, sm_run, key: str, lower_is_better: bool,
            target: float) -> tuple[dict, list[dict]]:
    """``reps`` pairs taken in turn, each the put kernel's run, send_messages' run and
    send_messages' run again, in the order PAIR_ORDERS gives pair k (``order``): the put
    kernel against send_messages (``_compare``) with the control beside it
    (``_control``) and each run's host load (``host``), and send_messages' first runs.
    ``put_run`` and ``sm_run`` take ``around_kernel`` (``hostload.watched_run``)."""
    runs = {"put": [], "send_messages": [], "send_messages_again": []}
    host = {k: [] for k in runs}
    fns = {"put": put_run, "send_messages": sm_run, "send_messages_again": sm_run}
    orders = []
    for k in range(reps):
        step(f"{label} ({k + 1} of {reps})")
        orders.append(PAIR_ORDERS[k % len(PAIR_ORDERS)])
        for name in orders[-1]:
            r, h = hostload.watched_run(fns[name])
            runs[name].append(r)
            host[name].append(h)
    out = _compare(runs["put"], runs["send_messages"], key, lower_is_better, target)
    out["control"] = _control(runs["send_messages_again"], runs["send_messages"], key,
                              lower_is_better, target)
    # What the host did during each run (steal, preemptions: gpuwrite.bench.hostload), over
    # the whole call and (``kernel``) over the kernel's launch to its end, so a missed pair
    # can be read against it.
    out["host"] = host
    out["order"] = [list(o) for o in orders]
    return out, runs["send_messages"]


def _beside(sm_runs: list[dict], label: str, step, put_run, key: str, lower_is_better: bool,
            target: float) -> dict:
    """A variant of the put kernel run once per send_messages run of a measure's pairs,
    and compared with them (``_compare``): what the variant costs beside the same runs."""
    runs = []
    for k in range(len(sm_runs)):
        step(f"{label} ({k + 1} of {len(sm_runs)})")
        runs.append(put_run())
    return _compare(runs, sm_runs, key, lower_is_better, target)


# The measures, in the order a whole bench runs them; ``run(measures=...)`` takes any of
# them in any order.
MEASURE_GROUPS = ("latency", "bandwidth", "rate", "alltoall")


def measure_names(names) -> tuple[str, ...]:
    """``names`` (a sequence, or a comma-separated string) as a tuple of measures, each
    once, in the order given; ValueError naming what is not one."""
    if isinstance(names, str):
        names = [m for m in names.split(",") if m]
    bad = [m for m in names if m not in MEASURE_GROUPS]
    if bad or not names:
        raise ValueError(f"{', '.join(map(repr, bad)) or 'no measure'}: allowed are one or "
                         f"more of {', '.join(MEASURE_GROUPS)}")
    return tuple(dict.fromkeys(names))


def run(quick: bool = False, toy: bool = False, progress=None,
        measures: tuple[str, ...] = MEASURE_GROUPS, on_measure=None,
        pairs: int | None = None) -> dict:
    """The measurements named in ``measures`` (all by default), in that order, each once
    (one that is long or in question can go first); ``toy`` shrinks them to
    simulator sizes. ``on_measure(out)`` is called after each, with what is done so far
    (``out["complete"]`` False until the last), so a bench cut short keeps its measures.
    ``pairs``: the pairs of runs of each measure (default: LATENCY_PAIRS for latency,
    STREAM_PAIRS for bandwidth and rate, one with ``quick`` or ``toy``); more pairs narrow
    the median pair ratio's interval where runs spread."""
    if SIMULATOR and not toy:
        raise RuntimeError("the put bench measures a real GPU; none was found (on the "
                           "CUDA simulator, --toy runs it at toy sizes to check it works)")
    measures = measure_names(measures)
    if pairs is not None and (not isinstance(pairs, int) or pairs < 1):
        raise ValueError(f"pairs {pairs!r}: allowed is a whole number of at least 1")
    step = progress or (lambda msg: None)
    done = on_measure or (lambda out: None)
    out: dict = {"world": common.header(), "path": "gpu_push", "toy": toy,
                 **store.provenance(), "measures": list(measures), "complete": False}
    for name in measures:
        _MEASURE_RUNS[name](out, quick, toy, step, pairs)
        done(out)
    out["verdict"] = {k: out[k]["met"] for k in ("latency_64B", "bandwidth_1MiB", "rate_64B")
                      if k in out}
    if SIMULATOR:
        out["note"] = "CUDA simulator: the timings are a Python interpreter's"
    out["complete"] = True
    done(out)
    return out


def _pairs(pairs: int | None, quick: bool, toy: bool, default: int) -> int:
    """The pairs a measure runs: those asked for, else one for a quick or toy bench."""
    return pairs if pairs is not None else 1 if (quick or toy) else default


def _alltoall(out: dict, quick: bool, toy: bool, step, pairs=None) -> None:
    """The all-to-all per path (``experiments.apps.alltoall``)."""
    step("all-to-all per path")
    if toy:
        out["alltoall"] = alltoall.run(ranks=2, tokens=2, token_bytes=32,
                                       paths=("gpu_push", "auto"), repeats=1)
    else:
        out["alltoall"] = alltoall.run(ranks=8, tokens=256 if quick else 1024,
                                       token_bytes=4096, repeats=1 if quick else 3)


def _latency(out: dict, quick: bool, toy: bool, step, pairs: int | None = None) -> None:
    """64-byte latency: the put kernel (path a constant) against send_messages, and the
    kernel with the path an argument beside the same send_messages runs."""
    # Pairs of runs per measure: with 9 (latency) and 6 (bandwidth, rate), the median pair
    # ratio's interval (median_interval) covers it with at least 95 % confidence.
    lat_pairs = _pairs(pairs, quick, toy, LATENCY_PAIRS)

    # One QP, one message in flight.
    lat_n = 5 if toy else (200 if quick else 2000)
    lat_kw = dict(n_qps=1, wait_each=True, block_threads=32)
    if not toy:
        step("warm-up")
        put_latency_run(50)
        put_latency_run(50, path_constant=False)
        put_latency_run(50, thread_scope=True)
        runner.run("gpu_push", [64] * 50, **lat_kw)

    def sm_latency(**kw):
        r = runner.run("gpu_push", [64] * lat_n, **lat_kw, **kw)
        return {"p50_us": r.latency_p50_us, "p99_us": r.latency_p99_us,
                "delivered": r.delivered, "messages": r.messages}

    out["latency_64B"], sm_runs = _paired(lat_pairs, "64-byte latency", step,
                                          lambda **kw: put_latency_run(lat_n, **kw), sm_latency,
                                          "p50_us", True, TARGET_LATENCY_RATIO_MAX)
    # The same with the path a kernel argument (every path's code compiled in), beside the
    # same send_messages runs: what naming the path as a constant saves.
    out["latency_64B_path_argument"] = _beside(
        sm_runs, "64-byte latency, path an argument", step,
        lambda: put_latency_run(lat_n, path_constant=False), "p50_us", True,
        TARGET_LATENCY_RATIO_MAX)
    # Lane 0 alone (api.open_thread), the other lanes gone: since session 40 send_messages
    # sends a table of one-thread messages (these 64-byte ones) from a kernel whose other
    # threads leave at once, where the warp's lanes all call put and quiet above.
    out["latency_64B_thread_scope"] = _beside(
        sm_runs, "64-byte latency, thread scope", step,
        lambda: put_latency_run(lat_n, thread_scope=True), "p50_us", True,
        TARGET_LATENCY_RATIO_MAX)


def _bandwidth(out: dict, quick: bool, toy: bool, step, pairs: int | None = None) -> None:
    """1 MiB bandwidth, gpuwrite bench's configuration for gpu_push."""
    cfg = dict(suite.BANDWIDTH_RUN["gpu_push"])
    size = 1 << 20
    n_qps, per_qp = cfg["n_qps"], (2 if quick else 8)
    threads, workers, batch = cfg["block_threads"], cfg["workers"], cfg["batch"]
    if toy:
        size, n_qps, per_qp, threads, workers = 4096, 2, 2, 8, 1
        cfg.update(chunk_bytes=1024, stage_slot_bytes=256, stage_slots=64)
    session_kw = dict(chunk_bytes=cfg["chunk_bytes"], ring_each_bytes=cfg["chunk_bytes"],
                      stage_slot_bytes=cfg["stage_slot_bytes"], stage_slots=cfg["stage_slots"],
                      workers=workers)

    def sm_bandwidth(**kw):
        return _sm_stream(runner.run(
            "gpu_push", [size] * (n_qps * per_qp), n_qps=n_qps, batch=batch,
            block_threads=threads, workers=workers, chunk_bytes=cfg["chunk_bytes"],
            stage_slot_bytes=cfg["stage_slot_bytes"], stage_slots=cfg["stage_slots"], **kw))

    out["bandwidth_1MiB"], _ = _paired(
        _pairs(pairs, quick, toy, STREAM_PAIRS), "1 MiB bandwidth", step,
        lambda **kw: put_stream_run(n_qps, per_qp, size, threads=threads, batch=batch,
                                    warp_scope=False, **session_kw, **kw),
        sm_bandwidth, "gbytes", False, TARGET_BANDWIDTH_RATIO_MIN)
    out["bandwidth_1MiB"]["size_bytes"] = size


def _rate(out: dict, quick: bool, toy: bool, step, pairs: int | None = None) -> None:
    """64-byte message rate: 256 QPs of one warp each, a doorbell every 16 messages; and
    the kernel with the path and scope arguments beside the same send_messages runs."""
    # Runs of 2000 messages per QP (7 ms at 70 M/s) varied by up to 10 % each, the first
    # of each kernel often slowest (session 15): one untimed run of each first, and 4000.
    # After untimed runs of 200 per QP, put's first two timed runs were still its slowest
    # in session 31 (57.7 and 46.5 M/s, then 66.2 to 71.0) and send_messages' first its
    # slowest (65.0, then 68.3 to 73.4), in whatever place of their triples: the untimed
    # runs are now as long as the timed ones.
    n_qps, per_qp, workers = (2, 8, 1) if toy else (256, 500 if quick else 4000,
                                                     suite.RATE_WORKERS)

    def put_rate(per, **kw):
        return put_stream_run(n_qps, per, 64, threads=32, batch=16, warp_scope=True,
                              workers=workers, **SMALL_RINGS, **kw)

    def sm_rate(per, **kw):
        return _sm_stream(runner.run("gpu_push", [64] * (n_qps * per), n_qps=n_qps, batch=16,
                                     block_threads=32, workers=workers, **kw))

    if not toy:
        step("64-byte message rate: warm-up")
        put_rate(per_qp)
        put_rate(per_qp, path_constant=False)       # the argument kernel's runs below
        sm_rate(per_qp)
    out["rate_64B"], sm_rate_runs = _paired(
        _pairs(pairs, quick, toy, STREAM_PAIRS), "64-byte message rate", step,
        lambda **kw: put_rate(per_qp, **kw), lambda **kw: sm_rate(per_qp, **kw), "mpps", False,
        TARGET_RATE_RATIO_MIN)
    # The same with the path and scope kernel arguments (put_stream: every path's and both
    # scopes' code compiled in), beside the same send_messages runs: the kernel the rate
    # pairs ran until session 31, when put's rate was 0.93 to 1.01x send_messages'.
    out["rate_64B_path_argument"] = _beside(
        sm_rate_runs, "64-byte message rate, path and scope arguments", step,
        lambda: put_rate(per_qp, path_constant=False), "mpps", False, TARGET_RATE_RATIO_MIN)


_MEASURE_RUNS = {"latency": _latency, "bandwidth": _bandwidth, "rate": _rate,
                 "alltoall": _alltoall}


# The measures a put bench file holds, in the order printed, with their unit.
MEASURES = (("latency_64B", "p50_us", "us"), ("latency_64B_path_argument", "p50_us", "us"),
            ("latency_64B_thread_scope", "p50_us", "us"),
            ("bandwidth_1MiB", "gbytes", "GB/s"), ("rate_64B", "mpps", "M msg/s"),
            ("rate_64B_path_argument", "mpps", "M msg/s"))


def summary(out: dict) -> list[str]:
    """A put bench file in words, a line per measure: pairs within the target, the
    verdict on the median pair ratio, the control's pairs, both kernels' runs (min to max)
    and the most steal in any of the measure's runs; then the all-to-all per path."""
    lines = [out.get("world", ""), f"commit {out.get('git_commit') or 'not recorded'}"]
    if out.get("complete") is False:
        lines.append("INCOMPLETE: the bench stopped before its end; measures done: "
                     + (", ".join(n for n, _, _ in MEASURES if n in out) or "none"))
    for name, key, unit in MEASURES:
        m = out.get(name)
        if not m:
            continue
        # Files before session 18 judged the medians only: no pairs, one run each before 9.
        put = m["put"].get(f"runs_{key}", [m["put"][key]])
        sm = m["send_messages"].get(f"runs_{key}", [m["send_messages"][key]])
        control = m.get("control", {}).get("runs_met")
        pairs = (f"{m['runs_met']} pairs {m['target']}" if "runs_met" in m else
                 f"medians {m['target']}: {'met' if m.get('met') else 'missed'}")
        steal = [h.get("steal_ms") for runs in m.get("host", {}).values() for h in runs]
        steal = [x for x in steal if x is not None]
        lines.append(
            f"{name}: {pairs}, "
            + (f"median ratio {m['ratio']:.3f} ({m['median_ratio_verdict']})"
               if "median_ratio_verdict" in m else f"ratio {m['ratio']:.3f}")
            + (f"; control {control}" if control else "")
            + f"; put {min(put):.2f} to {max(put):.2f} {unit}, send_messages "
            f"{min(sm):.2f} to {max(sm):.2f}"
            + (f"; steal up to {max(steal):.0f} ms a run" if steal else ""))
    for path, v in out.get("alltoall", {}).get("paths", {}).items():
        if "ratio_to_bulk_store_time" in v:
            lines.append(f"all-to-all {path}: {v['seconds'] * 1e3:.2f} ms, "
                         f"{v['ratio_to_bulk_store_time']:.2f}x the bytes over the bulk "
                         f"stores, {'every byte checked' if v['verified'] else 'BYTES WRONG'}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="put + quiet against send_messages, and "
                                                 "the all-to-all per path, as JSON")
    parser.add_argument("--out", help="write the JSON here and print a summary (default: "
                                      "print the JSON)")
    parser.add_argument("--show", metavar="FILE",
                        help="print the summary of a stored put bench file; run nothing")
    parser.add_argument("--quick", action="store_true", help="fewer messages and runs")
    parser.add_argument("--toy", action="store_true",
                        help="toy sizes (the CUDA simulator can run these)")
    parser.add_argument("--measures", type=_measures, default=MEASURE_GROUPS,
                        metavar="LIST", help="comma-separated, any of "
                        f"{','.join(MEASURE_GROUPS)} (default: all)")
    parser.add_argument("--pairs", type=common.positive, default=None, metavar="N",
                        help=f"pairs of runs per measure (default: {LATENCY_PAIRS} for latency, "
                        f"{STREAM_PAIRS} for bandwidth and rate; 1 with --quick or --toy)")
    args = parser.parse_args(argv)
    if args.show:
        try:
            with open(args.show) as f:
                stored = json.load(f)
        except (OSError, ValueError) as exc:
            print(f"error: --show {args.show!r}: {exc} (allowed: a JSON file the put bench "
                  "wrote)", file=sys.stderr)
            return 2
        print("\n".join(summary(stored)))
        return 0
    t0 = time.monotonic()

    def progress(message):
        print(f"[{time.monotonic() - t0:5.0f} s] {message}", file=sys.stderr)

    def write(out):
        # After each measure, so that a bench cut short (a timeout, a Ctrl-C) keeps those
        # done: the file says ``"complete": false`` until the last.
        with open(args.out, "w") as f:
            f.write(json.dumps(out, indent=2, default=str) + "\n")

    if args.out:
        # A path that cannot be written fails now, not after the first measure's minutes.
        try:
            write({"complete": False, "measures": list(args.measures)})
        except OSError as exc:
            print(f"error: --out {args.out!r}: {exc} (allowed: a file path that can be "
                  "written)", file=sys.stderr)
            return 2
    try:
        out = run(args.quick, args.toy, progress=progress, measures=args.measures,
                  on_measure=write if args.out else None, pairs=args.pairs)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        print("\n".join(summary(out)))
    else:
        print(json.dumps(out, indent=2, default=str))
    return 0


def _measures(text: str) -> tuple[str, ...]:
    try:
        return measure_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


if __name__ == "__main__":
    sys.exit(common.main_of(main, "python3 -m experiments.apps.bench")())
