"""``gpuwrite calibrate``: measure this GPU and write the parameter file the model reads.

Measurements (each the median of several runs, every run kept in the file):

* doorbell ping-pong: a GPU thread release-stores a host word, a C thread answers, the
  GPU's acquire loop sees it (``bench.suite.floor_pingpong_us``);
* dependent read round trip: a chain of ``ld.acquire.sys`` loads of mapped host memory,
  each address taken from the previous load (a PCIe non-posted read per load); the
  same chain in GPU memory for reference;
* bulk stores and bulk loads between a full grid and mapped host memory (GB/s);
* copy-engine bandwidth, device to host and host to device, pinned host memory, CUDA events;
* sweeps (``[sweeps]``): loads of host memory per us vs loads in flight, one chain per
  lane, chains that never meet (the GPU as a read requester: Little's law on the read
  round trip, each warp step waiting for its slowest lane); one warp's read of host memory
  vs size with 8 lines in flight (latency); copy-engine copies vs size and direction,
  queued behind a gate kernel so that the host's time to issue each is not counted.
  gpuwrite/model/validation.py predicts each of them (closed forms in
  gpuwrite/model/requester.py) and Fig. 8 prints the comparison. Files written before
  these kernels hold ``host_read_latency_vs_size`` and ``copy_engine_vs_size`` instead;
  validation.py says what those measured.

``calibration_params`` turns them into ``Params`` overrides (``[params]`` in the file, the
table ``Params.with_calibration`` applies): ``gpu.store_rate_gbps`` and
``gpu.copy_rate_gbps`` from the bandwidths, ``gpu.write_issue_ns`` from the host read round
trip (the derivation behind its default, gpuwrite/model/nic.py), ``link.generation`` and
``link.width`` where nvidia-smi reports them; from the sweeps, ``gpu.read_jitter_ns`` (one
warp step of 32 loads in flight), ``gpu.read_service_ns`` (the completer's time per read,
from the largest point of loads in flight) and ``gpu.copy_setup_h2d_ns`` / ``_d2h_ns`` (the
smallest queued copy). On the CUDA simulator the same steps run
tiny and the file says its timings are meaningless.
"""
from __future__ import annotations

import datetime
import re
import shutil
import subprocess
import time

import numpy as np

from gpuwrite.bench import suite
from gpuwrite.cudaenv import SIMULATOR, cuda
from gpuwrite.device.intrinsics import globaltimer_ns, ld_acquire_sys_u32
from gpuwrite.host.memory import mapped
from gpuwrite.kernel_cache import cached
from gpuwrite.model import pcie, requester
from gpuwrite.model.nic import GpuParams
from gpuwrite.model import topology as topo

# Words between successive loads of the read chain: 32 x 4 B = 128 B, a new line each time.
CHAIN_STRIDE_WORDS = 32


@cached
@cuda.jit
def _read_chain(chain, n_loads, out_ns):
    """One thread follows the chain: every load's address is the previous load's value."""
    if cuda.threadIdx.x != 0 or cuda.blockIdx.x != 0:
        return
    index = 0
    t0 = globaltimer_ns()
    for _ in range(n_loads):
        index = ld_acquire_sys_u32(chain, index)
    out_ns[0] = globaltimer_ns() - t0
    out_ns[1] = index  # keeps the chain live


@cached
@cuda.jit
def _load_chains(chain, n_chains, n_loads, spacing, out_ns, sink):
    """``n_chains`` threads each follow their own dependent chain: that many loads in flight."""
    t = cuda.grid(1)
    if t >= n_chains:
        return
    index = (t * spacing) % chain.shape[0]
    t0 = globaltimer_ns()
    for _ in range(n_loads):
        index = ld_acquire_sys_u32(chain, index)
    out_ns[t] = globaltimer_ns() - t0
    sink[t] = index


# Lines one warp keeps in flight in _warp_read_lines: each lane issues this many
# independent loads (one per line) before it uses any of them.
WARP_READ_LINES_IN_FLIGHT = 8
# A device-side wait's limit (the copy queue's gate): far above the host's time to enqueue.
GATE_TIMEOUT_NS = 2_000_000_000


@cached
@cuda.jit
def _warp_read_lines(src, words, repeats, out_ns):
    """One warp reads ``words`` 4-byte words of a fresh region, ``repeats`` regions in a row,
    ``WARP_READ_LINES_IN_FLIGHT`` 128-byte lines at a time: each lane loads its word of
    every line of a group into registers first, then adds them. A group past the region's
    last line re-reads that line (no branch, no extra request). Each region's address
    depends on the previous region's values (zeros), so regions do not overlap."""
    lane = cuda.threadIdx.x
    lines = (words + 31) // 32
    offset = 0
    total = 0
    values = cuda.local.array(WARP_READ_LINES_IN_FLIGHT, dtype=np.uint32)
    t0 = globaltimer_ns()
    for _ in range(repeats):
        for first in range(0, lines, WARP_READ_LINES_IN_FLIGHT):
            for j in range(WARP_READ_LINES_IN_FLIGHT):
                values[j] = src[offset + min(first + j, lines - 1) * 32 + lane]
            for j in range(WARP_READ_LINES_IN_FLIGHT):
                total += values[j]
        offset += lines * 32 + (total >> 31)
    if lane == 0:
        out_ns[0] = globaltimer_ns() - t0
        out_ns[1] = total


@cached
@cuda.jit
def _gate(flag, timeout_ns, timed_out):
    """Holds its stream until the host sets ``flag`` (or ``timeout_ns`` passes), so the
    copies queued behind it run back to back, without the host's time to issue each."""
    started = globaltimer_ns()
    while ld_acquire_sys_u32(flag, 0) == 0:
        if globaltimer_ns() - started > timeout_ns:
            timed_out[0] = 1
            return


@cached
@cuda.jit
def _bulk_load(src, sink):
    """Full-grid loads; each thread's sum is stored so no load is dead."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    total = 0
    k = start
    while k < src.shape[0]:
        total += src[k]
        k += stride
    sink[start] = total


def _grid() -> tuple[int, int]:
    if SIMULATOR:
        return 2, 32
    return 4 * cuda.get_current_device().MULTIPROCESSOR_COUNT, 512


def _elapsed_s(launch, repeats: int = 1) -> float:
    """Seconds for ``repeats`` calls of ``launch``: CUDA events on a GPU, the host clock on the simulator."""
    if SIMULATOR:
        started = time.perf_counter()
        for _ in range(repeats):
            launch()
        cuda.synchronize()
        return time.perf_counter() - started
    start, end = cuda.event(), cuda.event()
    start.record()
    for _ in range(repeats):
        launch()
    end.record()
    end.synchronize()
    return cuda.event_elapsed_time(start, end) / 1e3


def read_round_trip_us(chain, n_loads: int) -> float:
    """Time per dependent ``ld.acquire.sys`` load of ``chain`` (host-mapped or device array)."""
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    _read_chain[1, 32](chain, n_loads, out)
    cuda.synchronize()
    return float(out.copy_to_host()[0]) / n_loads / 1e3


def _chain(words: int) -> np.ndarray:
    return ((np.arange(words, dtype=np.int64) + CHAIN_STRIDE_WORDS) % words).astype(np.uint32)


def bulk_store_gbytes(nbytes: int) -> float:
    """Full-grid stores into mapped host memory (the bench's ceiling, on a GPU)."""
    if not SIMULATOR:
        return suite.bulk_store_gbytes(nbytes)
    dst = mapped((nbytes // 4,), np.uint32)
    blocks, threads = _grid()
    seconds = _elapsed_s(lambda: suite._bulk_store[blocks, threads](dst.kernel, 1))
    return nbytes / seconds / 1e9


def bulk_load_gbytes(nbytes: int, repeats: int = 3) -> float:
    """Full-grid loads from mapped host memory, GB/s."""
    src = mapped((nbytes // 4,), np.uint32)
    src.host[:] = 1
    blocks, threads = _grid()
    sink = cuda.to_device(np.zeros(blocks * threads, dtype=np.uint32))
    _bulk_load[blocks, threads](src.kernel, sink)  # compile and warm
    cuda.synchronize()
    seconds = _elapsed_s(lambda: _bulk_load[blocks, threads](src.kernel, sink), repeats)
    return repeats * nbytes / seconds / 1e9


def copy_engine_gbytes(nbytes: int, repeats: int = 3) -> tuple[float, float]:
    """(device to host, host to device) copy-engine bandwidth with pinned host memory, GB/s."""
    host = cuda.pinned_array(nbytes, dtype=np.uint8)
    host[:] = 7
    device = cuda.device_array(nbytes, dtype=np.uint8)
    cuda.to_device(host, to=device)
    device.copy_to_host(host)
    d2h = _elapsed_s(lambda: device.copy_to_host(host), repeats)
    h2d = _elapsed_s(lambda: cuda.to_device(host, to=device), repeats)
    return repeats * nbytes / d2h / 1e9, repeats * nbytes / h2d / 1e9


def loads_per_us(chain, outstanding: int, n_loads: int) -> float:
    """Dependent loads of mapped host memory per us with ``outstanding`` chains in flight.

    ``chain`` must hold ``outstanding x n_loads`` lines (``chain_words``): the chains never
    meet, so no chain reads a line another one has read."""
    needed = chain_words(outstanding, n_loads)
    if chain.shape[0] < needed:
        raise ValueError(f"chain of {chain.shape[0]} words is too short for {outstanding} chains of {n_loads} "
                         f"loads; allowed: at least {needed} words (chain_words)")
    threads = min(outstanding, 256)
    blocks = -(-outstanding // threads)
    out = cuda.to_device(np.zeros(outstanding, dtype=np.int64))
    sink = cuda.to_device(np.zeros(outstanding, dtype=np.uint32))
    spacing = (chain.shape[0] // outstanding) // CHAIN_STRIDE_WORDS * CHAIN_STRIDE_WORDS
    _load_chains[blocks, threads](chain, outstanding, n_loads, spacing, out, sink)
    cuda.synchronize()
    slowest_ns = float(out.copy_to_host().max())
    return outstanding * n_loads / (slowest_ns / 1e3) if slowest_ns > 0 else 0.0


def chain_words(outstanding: int, n_loads: int) -> int:
    """Words a chain array needs so that ``outstanding`` chains of ``n_loads`` lines stay apart."""
    return outstanding * n_loads * CHAIN_STRIDE_WORDS


def warp_read_latency_us(size_bytes: int, repeats: int) -> float:
    """Time for one warp to read ``size_bytes`` of mapped host memory, 8 lines in flight."""
    words = max(1, size_bytes // 4)
    lines = -(-words // 32)
    src = mapped((lines * 32 * repeats + 32,), np.uint32)
    src.host[:] = 0
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    _warp_read_lines[1, 32](src.kernel, words, repeats, out)
    cuda.synchronize()
    return float(out.copy_to_host()[0]) / repeats / 1e3


def copy_queued_gbytes(size_bytes: int, direction: str, copies: int) -> float:
    """``copies`` copy-engine copies of ``size_bytes`` (pinned host memory) queued behind a
    gate kernel and released at once, GB/s: the copy engine's time per copy, without the
    host's time to issue each (which a synchronous copy timed by events includes)."""
    host = cuda.pinned_array(size_bytes, dtype=np.uint8)
    device = cuda.device_array(size_bytes, dtype=np.uint8)
    stream = cuda.stream()
    if direction == "h2d":
        def launch():
            device.copy_to_device(host, stream=stream)
    else:
        def launch():
            device.copy_to_host(host, stream=stream)
    launch()
    stream.synchronize()
    flag = mapped((1,), np.uint32)
    flag.host[0] = 1 if SIMULATOR else 0    # the simulator runs a kernel to its end at launch
    timed_out = cuda.to_device(np.zeros(1, dtype=np.uint32))
    _gate[1, 1, stream](flag.kernel, GATE_TIMEOUT_NS, timed_out)
    started = time.perf_counter()
    start, end = cuda.event(), cuda.event()
    start.record(stream)
    for _ in range(copies):
        launch()
    end.record(stream)
    flag.host[0] = 1
    end.synchronize()
    if timed_out.copy_to_host()[0]:
        raise RuntimeError(f"the copy queue's gate timed out after {GATE_TIMEOUT_NS / 1e9:g} s: the host took that "
                           f"long to queue {copies} copies, so they were not timed back to back")
    seconds = time.perf_counter() - started if SIMULATOR else cuda.event_elapsed_time(start, end) / 1e3
    return copies * size_bytes / seconds / 1e9


SWEEPS = {  # calibrate's sweeps, the validation table's inputs (gpuwrite/model/validation.py)
    # the largest point of loads in flight defines gpu.read_service_ns (the reads' plateau)
    "full": {"outstanding": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), "chain_loads": 200,
             "read_sizes": (256, 1024, 4096, 16384, 65536), "read_repeats": 200,
             "copy_sizes": (4096, 65536, 1 << 20, 16 << 20), "copy_repeats": 20},
    "quick": {"outstanding": (1, 4, 16, 32, 128, 512, 1024, 2048), "chain_loads": 100,
              "read_sizes": (256, 1024, 4096, 65536), "read_repeats": 50,
              "copy_sizes": (4096, 65536, 1 << 20), "copy_repeats": 10},
    "simulator": {"outstanding": (1, 2), "chain_loads": 2, "read_sizes": (256,), "read_repeats": 1,
                  "copy_sizes": (4096,), "copy_repeats": 1},
}


def measure_sweeps(runs: int = 5, quick: bool = False, progress=None) -> dict:
    """Read and write bandwidth vs size and vs loads in flight, read latency vs size: each
    point the median of ``runs``. The model's predictions for them: validation.py."""
    step = progress or (lambda message: None)
    plan = SWEEPS["simulator" if SIMULATOR else "quick" if quick else "full"]
    size = SIZES["simulator" if SIMULATOR else "quick" if quick else "full"]
    step("loads of host memory vs loads in flight")
    words = max(size["chain"], chain_words(max(plan["outstanding"]), plan["chain_loads"]))
    chain = mapped((words,), np.uint32)
    chain.host[:] = _chain(words)
    out: dict = {"host_loads_vs_outstanding": [], "warp_read_vs_size": [], "copy_queued_vs_size": []}
    for outstanding in plan["outstanding"]:
        rates = [loads_per_us(chain.kernel, outstanding, plan["chain_loads"]) for _ in range(runs)]
        out["host_loads_vs_outstanding"].append({"outstanding": outstanding,
                                                 "loads_per_us": _significant(np.median(rates)),
                                                 "runs": [_significant(r) for r in rates]})
    step("read latency vs size")
    for read_size in plan["read_sizes"]:
        times = [warp_read_latency_us(read_size, plan["read_repeats"]) for _ in range(runs)]
        out["warp_read_vs_size"].append({"size_bytes": read_size, "lines_in_flight": WARP_READ_LINES_IN_FLIGHT,
                                         "latency_us": _significant(np.median(times)),
                                         "runs": [_significant(t) for t in times]})
    step("copy engine vs size")
    for direction in ("h2d", "d2h"):
        for copy_size in plan["copy_sizes"]:
            rates = [copy_queued_gbytes(copy_size, direction, plan["copy_repeats"]) for _ in range(runs)]
            out["copy_queued_vs_size"].append({"direction": direction, "size_bytes": copy_size,
                                               "gbytes_per_s": _significant(np.median(rates)),
                                               "runs": [_significant(r) for r in rates]})
    return out


# --- the whole run ---------------------------------------------------------------------

SIZES = {  # bytes for bandwidths, iterations for round trips
    "full": {"bulk": 256 << 20, "copy": 256 << 20, "pingpong": 2000, "loads": 2000, "chain": 1 << 22},
    "quick": {"bulk": 64 << 20, "copy": 64 << 20, "pingpong": 500, "loads": 500, "chain": 1 << 20},
    "simulator": {"bulk": 64 << 10, "copy": 64 << 10, "pingpong": 50, "loads": 50, "chain": 1 << 12},
}

WHAT = {
    "doorbell_pingpong": ("us", "GPU st.release.sys to a mapped host word, a C thread sees it and "
                          "release-stores an answer, the GPU's ld.acquire.sys loop sees it: round trip"),
    "host_read_round_trip": ("us", "one dependent ld.acquire.sys load of mapped host memory "
                             "(a PCIe non-posted read round trip)"),
    "device_read_round_trip": ("us", "one dependent ld.acquire.sys load of the GPU's own memory"),
    "bulk_store_to_host": ("GB/s", "full-grid GPU stores into mapped host memory"),
    "bulk_load_from_host": ("GB/s", "full-grid GPU loads from mapped host memory"),
    "copy_engine_d2h": ("GB/s", "copy engine, device to pinned host memory"),
    "copy_engine_h2d": ("GB/s", "copy engine, pinned host memory to device"),
}


def measure(runs: int = 5, quick: bool = False, progress=None) -> dict:
    """Every measurement, ``runs`` times: {name: [values]} in the units of ``WHAT``."""
    step = progress or (lambda message: None)
    size = SIZES["simulator" if SIMULATOR else "quick" if quick else "full"]
    values: dict[str, list[float]] = {name: [] for name in WHAT}
    step("doorbell ping-pong")
    suite.floor_pingpong_us(max(10, size["pingpong"] // 20))
    values["doorbell_pingpong"] = [suite.floor_pingpong_us(size["pingpong"]) for _ in range(runs)]
    step("dependent reads of host and GPU memory")
    host_chain = mapped((size["chain"],), np.uint32)
    host_chain.host[:] = _chain(size["chain"])
    device_chain = cuda.to_device(_chain(size["chain"]))
    read_round_trip_us(host_chain.kernel, 10)
    values["host_read_round_trip"] = [read_round_trip_us(host_chain.kernel, size["loads"]) for _ in range(runs)]
    values["device_read_round_trip"] = [read_round_trip_us(device_chain, size["loads"]) for _ in range(runs)]
    step("bulk stores and loads to host memory")
    values["bulk_store_to_host"] = [bulk_store_gbytes(size["bulk"]) for _ in range(runs)]
    values["bulk_load_from_host"] = [bulk_load_gbytes(size["bulk"]) for _ in range(runs)]
    step("copy engine")
    copies = [copy_engine_gbytes(size["copy"]) for _ in range(runs)]
    values["copy_engine_d2h"] = [d2h for d2h, _ in copies]
    values["copy_engine_h2d"] = [h2d for _, h2d in copies]
    return values


def _nvidia_smi() -> dict:
    """Driver and PCIe link as nvidia-smi reports them (empty where it is missing)."""
    if SIMULATOR or shutil.which("nvidia-smi") is None:
        return {}
    fields = ("driver_version", "pcie.link.gen.max", "pcie.link.width.max", "pcie.link.gen.current",
              "pcie.link.width.current")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    index = cuda.get_current_device().id
    lines = [line for line in out.splitlines() if line.strip()]
    if len(lines) <= index:
        return {}
    return {key: value.strip() for key, value in zip(fields, lines[index].split(","))}


def device_record(smi: dict) -> dict:
    """The [device] table: what was measured, where and when."""
    from gpuwrite.experiments.backends import device_name
    from gpuwrite.experiments.store import gpuwrite_version

    record = {
        "name": device_name(),
        "simulator": SIMULATOR,
        "date": datetime.date.today().isoformat(),
        "measured_at_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpuwrite_version": gpuwrite_version(),
    }
    if SIMULATOR:
        record["note"] = ("CUDA simulator: kernels ran as Python threads, so every timing below is "
                          "meaningless; this file only shows the format")
        record["driver"] = "none (CUDA simulator)"
        return record
    record["driver"] = smi.get("driver_version", "unknown")
    try:
        major, minor = cuda.cudadrv.driver.driver.get_version()
        record["cuda_driver_api"] = f"{major}.{minor}"
    except Exception:  # noqa: BLE001 (a record field, not worth failing a calibration for)
        record["cuda_driver_api"] = "unknown"
    record["compute_capability"] = ".".join(map(str, cuda.get_current_device().compute_capability))
    for key in ("pcie.link.gen.max", "pcie.link.width.max", "pcie.link.gen.current", "pcie.link.width.current"):
        if key in smi:
            record[key.replace(".", "_")] = smi[key]
    return record


def host_read_model_ns(link: pcie.LinkConfig | None = None) -> tuple[float, float]:
    """(one-way route latency, host memory latency) of the model's GPU read of host memory."""
    platform = topo.PlatformParams()
    route = topo.preset("same_switch", link, platform).route("gpu0", "mem0")
    return route.one_way_latency_ns, platform.host_memory_latency_ns


def calibration_params(medians: dict, smi: dict) -> tuple[dict, dict]:
    """(``[params]`` overrides, how each was derived) from the median measurements."""
    params: dict = {"gpu": {}, "link": {}}
    derivation = {}
    params["gpu"]["store_rate_gbps"] = _significant(medians["bulk_store_to_host"] * 8)
    derivation["gpu.store_rate_gbps"] = "bulk_store_to_host (GB/s) x 8"
    params["gpu"]["copy_rate_gbps"] = _significant(medians["copy_engine_d2h"] * 8)
    derivation["gpu.copy_rate_gbps"] = "copy_engine_d2h (GB/s) x 8"
    one_way_ns, memory_ns = host_read_model_ns()
    issue_ns = medians["host_read_round_trip"] * 1e3 - 2 * one_way_ns - memory_ns
    params["gpu"]["write_issue_ns"] = round(max(0.0, issue_ns) / 2, 1)
    derivation["gpu.write_issue_ns"] = (
        f"(host_read_round_trip - 2 x {one_way_ns:g} ns same_switch route - {memory_ns:g} ns host memory) / 2, "
        "as the default's derivation (gpuwrite/model/nic.py); floored at 0")
    params["gpu"]["read_issue_ns"] = round(max(0.0, issue_ns), 1)
    derivation["gpu.read_issue_ns"] = "host_read_round_trip - the same_switch route's round trip; floored at 0"
    if "device_read_round_trip" in medians:
        device_ns = round(medians["device_read_round_trip"] * 1e3, 1)
        params["platform"] = {"gpu_memory_latency_ns": device_ns}
        params["gpu"]["poll_interval_ns"] = device_ns
        derivation["platform.gpu_memory_latency_ns"] = "device_read_round_trip (a dependent load of GPU memory)"
        derivation["gpu.poll_interval_ns"] = "device_read_round_trip: one poll of the staging-credit word"
    generation = re.sub(r"\D", "", smi.get("pcie.link.gen.max", ""))
    width = re.sub(r"\D", "", smi.get("pcie.link.width.max", ""))
    if generation and int(generation) in pcie.TRANSFER_RATE_GTPS:
        params["link"]["generation"] = int(generation)
        derivation["link.generation"] = "nvidia-smi pcie.link.gen.max"
    if width and int(width) in pcie.LINK_WIDTHS:
        params["link"]["width"] = int(width)
        derivation["link.width"] = "nvidia-smi pcie.link.width.max"
    return {k: v for k, v in params.items() if v}, derivation


def sweep_params(sweeps: dict, round_trip_ns: float, params: dict, derivation: dict) -> None:
    """Adds the parameters the sweeps define to ``params`` and ``derivation`` (in place)."""
    link = pcie.LinkConfig(**params.get("link", {}))
    fit = requester.fit_read_jitter(sweeps.get("host_loads_vs_outstanding", []), round_trip_ns)
    if fit is not None:
        params.setdefault("gpu", {})["read_jitter_ns"] = round(fit[0], 1)
        derivation["gpu.read_jitter_ns"] = (
            f"host_loads_vs_outstanding at {fit[1]} loads in flight: one warp step vs the host read round trip, "
            "the expected slowest of its lanes (gpuwrite/model/requester.py)")
    jitter_ns = fit[0] if fit is not None else GpuParams().read_jitter_ns
    service = requester.fit_read_service(sweeps.get("host_loads_vs_outstanding", []), round_trip_ns, jitter_ns)
    if service is not None:
        params.setdefault("gpu", {})["read_service_ns"] = _significant(service[0])
        derivation["gpu.read_service_ns"] = (
            f"host_loads_vs_outstanding at {service[1]} loads in flight (its largest point): the completer's time "
            "per read whose queue of warps gives that rate (mean value analysis, gpuwrite/model/requester.py)")
    for direction, (setup_ns, size_bytes) in requester.fit_copy_setups(sweeps.get("copy_queued_vs_size", []),
                                                                       link).items():
        params.setdefault("gpu", {})[f"copy_setup_{direction}_ns"] = round(setup_ns, 1)
        derivation[f"gpu.copy_setup_{direction}_ns"] = (
            f"copy_queued_vs_size, {direction} at {size_bytes} B: time per copy minus its bytes at the link's rate")


def _significant(value) -> float:
    """Four significant digits: what these measurements can claim."""
    return float(f"{float(value):.4g}")


# The push's least by size (``suite.least_push_stores_us``): gpu_push's sizes of one WQE and
# the bench's two blocks; Fig. 9 draws it beside the physical line.
PUSH_LEAST = {
    "full": {"sizes": (64, 256, 1024, 4096, 16384, 65536), "threads": (32, 256)},
    "quick": {"sizes": (64, 1024, 65536), "threads": (32, 256)},
    "simulator": {"sizes": (64,), "threads": (32,)},
}


def measure_push_least(runs: int = 5, quick: bool = False, progress=None) -> list[dict]:
    """For each size and block of PUSH_LEAST, ``runs`` of the floor's ping-pong after the
    stores a gpu_push of that size orders before its doorbell, by the threads its kernel
    uses: the fastest (``least_us``, a least being what the hardware allowed at its
    fastest; the polls land in one phase or another by launch) and every run."""
    step = progress or (lambda message: None)
    mode = "simulator" if SIMULATOR else "quick" if quick else "full"
    iters = SIZES[mode]["pingpong"]
    step("the push's least by size")
    out = []
    for threads in PUSH_LEAST[mode]["threads"]:
        for nbytes in PUSH_LEAST[mode]["sizes"]:
            times = [suite.least_push_stores_us(nbytes, threads, iters) for _ in range(runs)]
            out.append({"size_bytes": nbytes, "block_threads": threads,
                        "least_us": _significant(min(times)),
                        "runs": [_significant(t) for t in times]})
    return out


def calibrate(runs: int = 5, quick: bool = False, progress=None) -> dict:
    """The whole file as a dict: [device], [measurements.*], [params], [derivation]."""
    values = measure(runs, quick, progress)
    smi = _nvidia_smi()
    measurements = {}
    for name, (unit, what) in WHAT.items():
        measurements[name] = {"value": _significant(np.median(values[name])), "unit": unit, "what": what,
                              "runs": [_significant(v) for v in values[name]]}
    medians = {name: entry["value"] for name, entry in measurements.items()}
    params, derivation = calibration_params(medians, smi)
    sweeps = measure_sweeps(runs, quick, progress)
    sweep_params(sweeps, medians["host_read_round_trip"] * 1e3, params, derivation)
    return {"device": device_record(smi), "measurements": measurements, "params": params,
            "derivation": derivation, "sweeps": sweeps,
            "push_least_vs_size": measure_push_least(runs, quick, progress)}


HEADER = """# gpuwrite calibrate: measurements of one machine, and the model parameters derived from them.
# Params.with_calibration(this file) applies [params]; [device], [measurements],
# [derivation], [sweeps] and [push_least_vs_size] (the floor's ping-pong after the stores a
# gpu_push of each size orders before its doorbell, Fig. 9's dotted line) are the record.
# Use it with `gpuwrite model ... --calibration FILE` or
# `calibration = "FILE"` in an experiment's [sweep.fixed].
"""


def to_toml(data: dict) -> str:
    import tomli_w

    header = HEADER
    if data["device"]["simulator"]:
        header += "# SIMULATOR: the CUDA simulator ran these kernels; every timing is meaningless.\n"
    return header + tomli_w.dumps(data)


def default_file_name(data: dict) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", data["device"]["name"].lower()).strip("-") or "gpu"
    return f"{slug}-{data['device']['date']}.toml"
