"""``gpuwrite bench``: the floor, the ceilings and every path, measured in one run.

Targets (issue: foundation), each a ratio against something measured in the same run:
  * gpu_push 64-byte latency, post to completion seen by the kernel <= 1.10 x floor,
    where the floor is a bare GPU-to-host doorbell ping-pong through mapped memory
    (both poll at once; both are also measured with pauses before the first poll; the
    median of three runs of each, taken in turn);
  * gpu_push bandwidth for >= 1 MiB messages >= 0.90 x bulk GPU-store-to-host bandwidth
    (the median of five runs);
  * >= 20 million 64-byte messages per second, many blocks posting, doorbells batched;
  * nic_pull and host_staged measured beside gpu_push.
"""
from __future__ import annotations

import numpy as np

from gpuwrite._gw_cffi import ffi, lib
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device.intrinsics import globaltimer_ns, ld_acquire_sys_u32, st_release_sys_u32
from gpuwrite.bench.breakdown import push_breakdown
from gpuwrite.host.memory import mapped
from gpuwrite.paths import runner

TARGET_LATENCY_RATIO = 1.10
TARGET_BANDWIDTH_RATIO = 0.90
TARGET_RATE_MPPS = 20.0
BANDWIDTH_REPEATS = 5
LATENCY_REPEATS = 3
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
_BW_COMMON = dict(n_qps=128, batch=4, block_threads=512, workers=12)
BANDWIDTH_RUN = {
    "gpu_push": dict(_BW_COMMON, chunk_bytes=BW_CHUNK_BYTES, stage_slot_bytes=4096,
                     stage_slots=BW_CHUNKS_IN_FLIGHT * (BW_CHUNK_BYTES // 4096 + 1)),
    "host_staged": dict(_BW_COMMON, chunk_bytes=BW_CHUNK_BYTES,
                        bounce_bytes=BW_CHUNKS_IN_FLIGHT * BW_CHUNK_BYTES),
    "nic_pull": dict(_BW_COMMON, chunk_bytes=1 << 20),
}
# Pauses before the first poll (ns) with which the floor and gpu_push are also measured.
POLL_DELAYS_NS = (100, 200, 300, 400, 600)


@cuda.jit
def _pingpong(ping, pong, iters, out_ns, timeout_ns, poll_delay_ns):
    if cuda.threadIdx.x != 0 or cuda.blockIdx.x != 0:
        return
    for k in range(iters):
        t0 = globaltimer_ns()
        st_release_sys_u32(ping, 0, k + 1)
        while globaltimer_ns() - t0 < poll_delay_ns:
            pass
        while ld_acquire_sys_u32(pong, 0) != k + 1:
            if globaltimer_ns() - t0 > timeout_ns:
                out_ns[k] = -1
                return
        out_ns[k] = globaltimer_ns() - t0


@cuda.jit
def _bulk_store(dst, reps):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for r in range(reps):
        k = start
        while k < dst.shape[0]:
            dst[k] = k + r
            k += stride


def floor_pingpong_us(iters: int, poll_delay_ns: int = 0) -> float:
    """Median round trip of a bare doorbell ping-pong between GPU and a host C thread;
    ``poll_delay_ns`` after its store, the GPU starts polling for the answer."""
    ping = mapped((16,), np.uint32)
    pong = mapped((16,), np.uint32)
    out = cuda.to_device(np.zeros(iters, dtype=np.int64))
    responder = lib.gw_pong_start(ffi.cast("void *", ping.address), ffi.cast("void *", pong.address))
    try:
        _pingpong[1, 32](ping.kernel, pong.kernel, iters, out, 2_000_000_000, poll_delay_ns)
        cuda.synchronize()
    finally:
        lib.gw_pong_stop(responder)
    ns = out.copy_to_host()
    if (ns < 0).any():
        raise RuntimeError("the ping-pong responder did not answer within 2 s")
    return float(np.median(ns[iters // 10:]) / 1e3)


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


def run_suite(quick: bool = False, progress=None) -> dict:
    if SIMULATOR:
        raise RuntimeError("gpuwrite bench measures a real GPU; none was found (the CUDA "
                           "simulator's timings would be Python's, not a GPU's)")
    step = progress or (lambda msg: None)
    lat_n = 200 if quick else 2000
    out: dict = {"targets": {"latency_ratio_max": TARGET_LATENCY_RATIO,
                             "bandwidth_ratio_min": TARGET_BANDWIDTH_RATIO,
                             "rate_mpps_min": TARGET_RATE_MPPS}}
    step("floor: doorbell ping-pong")
    floor_pingpong_us(100)
    # The floor as the calibration measures it polls right after its store. A read that
    # leaves at once can reach host memory before the answer and waste a round trip, so
    # the floor and gpu_push are also measured with pauses before the first poll
    # (I_POLL_DELAY_NS). The targets are judged without a pause, on both sides alike; the
    # sweeps show how much the phase of the first poll moves each (BENCHMARKS.md).
    out["floor_by_poll_delay_us"] = {str(d): floor_pingpong_us(lat_n, d) for d in POLL_DELAYS_NS}
    step("ceiling: bulk GPU stores to host")
    out["bulk_store_gbytes"] = bulk_store_gbytes(64 << 20 if quick else 256 << 20)

    # The floor's p50 moves between runs of one process by up to 0.3 us on an H200 (the
    # phase of its polls against the answer; BENCHMARKS.md, session 4): the floor and
    # every path are run LATENCY_REPEATS times, in turn, and judged by their medians.
    kw = dict(n_qps=1, wait_each=True, block_threads=32)
    for path in runner.PATHS:
        runner.run(path, [64] * 50, **kw)
    floors: list[float] = []
    runs_lat: dict[str, list] = {p: [] for p in runner.PATHS}
    repeats = 1 if quick else LATENCY_REPEATS
    for k in range(repeats):
        step(f"64-byte latency: floor and every path ({k + 1} of {repeats})")
        floors.append(floor_pingpong_us(lat_n))
        for path in runner.PATHS:
            runs_lat[path].append(runner.run(path, [64] * lat_n, **kw))
    out["floor_pingpong_us"] = float(np.median(floors))
    out["floor_runs_us"] = floors
    lat = {}
    for path, rs in runs_lat.items():
        p50 = float(np.median([r.latency_p50_us for r in rs]))
        lat[path] = {"p50_us": p50, "runs_p50_us": [r.latency_p50_us for r in rs],
                     "p99_us": float(np.median([r.latency_p99_us for r in rs])),
                     "delivered": min(r.delivered for r in rs), "messages": rs[0].messages,
                     "ratio_to_floor": p50 / out["floor_pingpong_us"]}
    out["latency_64B"] = lat
    step("gpu_push: 64-byte latency by poll delay")
    out["gpu_push_64B_by_poll_delay_us"] = {
        str(d): runner.run("gpu_push", [64] * lat_n, n_qps=1, wait_each=True, block_threads=32,
                           poll_delay_ns=d).latency_p50_us for d in POLL_DELAYS_NS}
    best_push = min([lat["gpu_push"]["p50_us"], *out["gpu_push_64B_by_poll_delay_us"].values()])
    best_floor = min([out["floor_pingpong_us"], *out["floor_by_poll_delay_us"].values()])
    out["latency_best_pause_each_ratio"] = best_push / best_floor
    step("gpu_push: 64-byte latency, step by step")
    out["latency_breakdown_ns"] = push_breakdown(lat_n)

    bw = {}
    mib = 1 << 20
    n_big = 256 if quick else 1024
    # Runs of one configuration differ by up to 0.1x on an H200 (BENCHMARKS.md): each
    # path is run BANDWIDTH_REPEATS times, in turn with the others, and judged by the
    # median; every run is reported.
    repeats = 1 if quick else BANDWIDTH_REPEATS
    runs: dict[str, list] = {p: [] for p in ("gpu_push", "nic_pull", "host_staged")}
    for k in range(repeats):
        for path in runs:
            step(f"{path}: 1 MiB bandwidth ({k + 1} of {repeats})")
            r = runner.run(path, [mib] * n_big, **BANDWIDTH_RUN[path])
            runs[path].append((r.throughput_gbps / 8, r.delivered, r.messages))
    for path, rs in runs.items():
        gbytes = float(np.median([g for g, _, _ in rs]))
        bw[path] = {"gbytes": gbytes, "runs_gbytes": [g for g, _, _ in rs],
                    "delivered": min(d for _, d, _ in rs), "messages": rs[0][2],
                    "wqe_bytes": BANDWIDTH_RUN[path]["chunk_bytes"],
                    "ratio_to_bulk_store": gbytes / out["bulk_store_gbytes"]}
    out["bandwidth_1MiB"] = bw

    rate = {}
    n_qps = 256
    per_qp = 500 if quick else 2000
    for path in ("gpu_push", "gpu_push_inline"):
        step(f"{path}: 64-byte message rate")
        r = runner.run(path, [64] * (n_qps * per_qp), n_qps=n_qps, batch=16, block_threads=32,
                       workers=14)
        span_s = r.bytes * 8 / (r.throughput_gbps * 1e9) if r.throughput_gbps else float("inf")
        rate[path] = {"mpps": r.delivered / span_s / 1e6, "delivered": r.delivered,
                      "messages": r.messages}
    out["rate_64B"] = rate
    out["verdict"] = {
        "latency": lat["gpu_push"]["ratio_to_floor"] <= TARGET_LATENCY_RATIO,
        "bandwidth": bw["gpu_push"]["ratio_to_bulk_store"] >= TARGET_BANDWIDTH_RATIO,
        "rate": rate["gpu_push"]["mpps"] >= TARGET_RATE_MPPS,
    }
    return out
