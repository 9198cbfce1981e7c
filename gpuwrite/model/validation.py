"""The model's predictions against measurements: this project's GPUs and a published NIC.

Two sources, one parameter set per machine (no per-size fitting):

* pcie-bench's NFP6000 DMA engine (Neugebauer et al., SIGCOMM 2018; the data repository's
  values copied into gpuwrite/model/validation_data/pcie_bench_nfp6000_e5-2630v4.csv):
  latency of one DMA read of host memory vs size, and DMA read bandwidth vs size, with
  the parameter file nfp6000_e5-2630v4.toml beside it. Model: ``paths.read_ns`` (one read
  at zero load) and ``paths.read_engine_gbps`` (saturated reads) on the route NIC -> host
  memory, local or across sockets.
* this project's GPU as a PCIe requester (``gpuwrite calibrate`` files in
  experiments/calibration/): its loads of mapped host memory are reads of 128-byte lines
  (assumption: one L2 line per request), its copy engine reads (H2D) and writes (D2H) in
  MRRS / MPS-sized TLPs, its stores are posted writes. Bandwidth predictions are the PCIe
  accounting's link-bound rates; the sweeps calibrate adds (reads vs outstanding loads,
  latency vs size, copy engine vs size) are predicted with Little's law on the read
  round trip, the warps in flight queueing at one completer (``gpu.read_service_ns``,
  fitted at the largest point of loads in flight). Rows the model was calibrated from are
  marked ``fitted``: they are not tests.

``table()`` gives one row per comparison: source, machine, quantity, size, measured, model,
error %, and whether it counts toward the goal (within 10 % for transfers of 256 B and more).
"""
from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from gpuwrite import calibfiles
from gpuwrite.model import paths, pcie, requester
from gpuwrite.model.params import Params, _load_toml

# Shipped with the package (pyproject package-data): the model is checked wherever it is installed.
VALIDATION_DIR = Path(__file__).resolve().parent / "validation_data"
PCIE_BENCH_DATA = VALIDATION_DIR / "pcie_bench_nfp6000_e5-2630v4.csv"
PCIE_BENCH_PARAMS = VALIDATION_DIR / "nfp6000_e5-2630v4.toml"
GOAL_PCT = 10.0
GOAL_MIN_BYTES = 256
GPU_LOAD_BYTES = 128     # assumption: a GPU load of host memory asks for one 128-byte L2 line


def _error_pct(measured: float, model: float) -> float:
    return (model / measured - 1.0) * 100.0 if measured else float("nan")


def _row(source, machine, quantity, size_bytes, measured, model, unit, kind="prediction", note=""):
    error = _error_pct(measured, model)
    counts = kind == "prediction" and (size_bytes is None or size_bytes >= GOAL_MIN_BYTES)
    return {"source": source, "machine": machine, "quantity": quantity, "size_bytes": size_bytes,
            "measured": measured, "model": model, "unit": unit, "error_pct": error, "kind": kind,
            "within_goal": bool(counts and abs(error) <= GOAL_PCT) if counts else None, "note": note}


# The NFP's read engine. Its time per DMA (measured rates) is 16 ns at 64 B, 23.4 at 128 B,
# 27.3 at 129 B, 34.6 at 192 B and 43.0 at 256 B, where neither the link (38.1 ns at 256 B)
# nor the window (32 x 256 B per 528 ns round trip) binds; from 257 B on it follows the
# link. Modelled as a time per request that grows with its bytes, fixed + bytes x per byte
# (paths.read_request_ns), fitted through the local 129 B and 192 B points: 12.17 ns +
# 0.117 ns a byte. The mechanism is inferred from pcie-bench's size sweep: no description of
# the NFP6000 DMA engine's internals was found. pcie-bench's firmware
# (github.com/pcie-bench/pciebench-nfp, me/pcie_dma.c) runs worker threads that each enqueue
# one DMA from host memory into the NFP's CTM and wait for it; its paper and data do not say
# where the time per DMA goes. Below 129 B the line misses both ways (64 B DMAs are faster,
# 63, 65 and 127 B slower), which no size-independent cost captures.
FITTED_BANDWIDTH_BYTES = (129, 192)     # local socket: define nic.read_engine_fixed_ns / _per_byte_ns
NFP_BANDWIDTH_NOTE = ("min(link, outstanding reads x size / round trip, size / time per DMA), time per DMA "
                      "= 12.17 ns + 0.117 ns a byte (fitted at 129 and 192 B, inferred from the size sweep: no "
                      "source describes the NFP engine's internals); below 129 B the measured times scatter "
                      "around that line (64 B faster, 63, 65 and 127 B slower)")


def pcie_bench_rows(data: Path = PCIE_BENCH_DATA, params_file: Path = PCIE_BENCH_PARAMS) -> list[dict]:
    """pcie-bench's NFP6000: DMA read latency and bandwidth vs size, local and remote socket."""
    params = Params().with_calibration(params_file)
    local = params.build_topology()
    remote = params.updated({"topology": "across_sockets"}).build_topology()
    routes = {"s0-s0-s0": (local, "nic0", "mem0"), "s0-s1-s1": (remote, "nic0", "mem0")}
    source = "pcie-bench (Neugebauer et al., SIGCOMM 2018), NFP6000 / Xeon E5-2630v4"
    out = []
    with data.open() as handle:
        for record in csv.DictReader(line for line in handle if not line.startswith("#")):
            topology, nic, memory = routes[record["topology"]]
            route, target = topology.route(nic, memory), topology.node(memory)
            size = int(record["size_bytes"])
            measured = float(record["value"])
            where = "local memory" if record["topology"] == "s0-s0-s0" else "remote socket's memory"
            if record["measure"] == "latency":
                busy, first = paths.read_ns(route, target, size, params)
                kind = "fitted" if size in (64, 2048) and record["topology"] == "s0-s0-s0" else "prediction"
                if size == 64 and record["topology"] == "s0-s1-s1":
                    kind = "fitted"     # platform.socket_link_latency_ns comes from this point
                out.append(_row(source, f"NFP6000, {where}", "DMA read latency", size, measured, busy + first,
                                "ns", kind))
            else:
                model = paths.read_engine_gbps(route, target, size, params)
                local = record["topology"] == "s0-s0-s0"
                kind = "fitted" if size in FITTED_BANDWIDTH_BYTES and local else "prediction"
                note = ("defines nic.read_engine_fixed_ns and nic.read_engine_per_byte_ns; " if kind == "fitted"
                        else "") + NFP_BANDWIDTH_NOTE
                out.append(_row(source, f"NFP6000, {where}", "DMA read bandwidth", size, measured, model, "Gb/s",
                                kind, note))
    return out


def _gpu_round_trip_ns(params: Params) -> float:
    topology = params.build_topology()
    gpu = params.endpoints(topology)[0]
    memory = topology.host_memory_near(gpu)
    route = topology.route(gpu, memory)
    return 2 * route.one_way_latency_ns + topology.node(memory).latency_ns + params.gpu.read_issue_ns


def calibration_rows(file: Path) -> list[dict]:
    """One calibrate file: the model with that file applied, against what it measured."""
    data = _load_toml(file)
    params = Params().with_calibration(file)
    link = params.link
    device = data.get("device", {})
    machine = f"{device.get('name', file.stem)}, {device.get('measured_at_utc', device.get('date', ''))}"
    source = "gpuwrite calibrate"
    measured = {name: entry["value"] for name, entry in data.get("measurements", {}).items()}
    out = []
    gbytes = lambda gbps: gbps / 8.0   # noqa: E731 (a unit conversion)
    large = 1 << 20
    predictions = {
        "bulk_load_from_host": ("GPU loads of host memory, full grid", None,
                                gbytes(pcie.effective_rate_gbps(link, "read", GPU_LOAD_BYTES)), "GB/s",
                                f"link-bound reads of {GPU_LOAD_BYTES} B lines"),
        "copy_engine_h2d": ("copy engine H2D (DMA reads)", None, gbytes(pcie.effective_rate_gbps(link, "read", large)),
                            "GB/s", "link-bound, MRRS requests, MPS completions"),
        "copy_engine_d2h": ("copy engine D2H (DMA writes)", None,
                            gbytes(pcie.effective_rate_gbps(link, "write", large)), "GB/s", "link-bound, MPS TLPs"),
        "bulk_store_to_host": ("GPU stores to host memory, full grid", None,
                               gbytes(pcie.effective_rate_gbps(link, "write", large)), "GB/s",
                               "link-bound, MPS TLPs (write combining assumed)"),
    }
    for name, (quantity, size, model, unit, note) in predictions.items():
        if name in measured:
            out.append(_row(source, machine, quantity, size, measured[name], model, unit, note=note))
    # the bulk transfers are 64-256 MiB: size None (they count toward the goal)
    if "host_read_round_trip" in measured:
        out.append(_row(source, machine, "GPU dependent read of host memory", 4, measured["host_read_round_trip"] * 1e3,
                        _gpu_round_trip_ns(params), "ns", "fitted", "defines gpu.read_issue_ns"))
    if "device_read_round_trip" in measured:
        out.append(_row(source, machine, "GPU dependent read of its own memory", 4,
                        measured["device_read_round_trip"] * 1e3, params.platform.gpu_memory_latency_ns, "ns",
                        "fitted", "defines platform.gpu_memory_latency_ns"))
    out += _sweep_rows(data.get("sweeps", {}), params, source, machine)
    return out


# calib._warp_read, the kernel of files written before calib._warp_read_lines: per lane
# ``total += src[offset + k]``, k += 32. Its PTX for sm_90 (numba-cuda 0.30.4) unrolls the
# loop by 4 and runs the lines that do not fill a group of 4 first, one round trip each;
# ptxas then unrolls again (bodies of 16, 8 and 4 loads, the sums taken between loads;
# SASS from the H100 run of 2026-11-23), so how many loads overlap is not known from it.
FIRST_WARP_READ_UNROLL = 4


def _sweep_rows(sweeps: dict, params: Params, source: str, machine: str) -> list[dict]:
    """Calibrate's sweeps, predicted by the closed forms of gpuwrite/model/requester.py."""
    out = []
    link = params.link
    round_trip = _gpu_round_trip_ns(params)
    chains = sweeps.get("host_loads_vs_outstanding", [])
    fit = requester.fit_read_jitter(chains, round_trip)
    jitter_ns = fit[0] if fit is not None else params.gpu.read_jitter_ns
    service = requester.fit_read_service(chains, round_trip, jitter_ns)
    service_ns = service[0] if service is not None else params.gpu.read_service_ns
    for point in chains:
        outstanding = int(point["outstanding"])
        model = requester.chains_loads_per_us(outstanding, round_trip, jitter_ns, link, params.gpu.read_tags,
                                              service_ns=service_ns)
        out.append(_chains_row(point, model, round_trip, service, service_ns, fit, params, source, machine))
    for point in sweeps.get("warp_read_vs_size", []):
        size, lines_in_flight = int(point["size_bytes"]), int(point["lines_in_flight"])
        measured, model = point["latency_us"] * 1e3, requester.warp_read_ns(size, lines_in_flight, round_trip,
                                                                             jitter_ns, link)
        note = "per group of lines in flight: its slowest read, then its bytes at the link's rate"
        if _misses(measured, model):
            groups = pcie.ceil_div(pcie.ceil_div(size, requester.LINE_BYTES), lines_in_flight)
            note += (f"; lacks what made a group cheaper here: {measured / groups / 1e3:.2f} us a group, between "
                     f"the round trip ({round_trip / 1e3:.2f}) and the model's slowest of {lines_in_flight} reads "
                     f"({model / groups / 1e3:.2f}): groups overlapping (their loads do not wait for the previous "
                     "group's values) or one warp's lines spreading less than chains' reads (gpu.read_jitter_ns "
                     "is fitted on chains); one warp does not queue at the completer")
        out.append(_row(source, machine, f"one warp reads host memory, {lines_in_flight} lines in flight",
                        size, measured, model, "ns", note=note))
    for point in sweeps.get("host_read_latency_vs_size", []):
        size = int(point["size_bytes"])
        measured = point["latency_us"] * 1e3
        model = requester.unrolled_loop_read_ns(size, FIRST_WARP_READ_UNROLL, round_trip, jitter_ns, link)
        note = (f"the kernel's PTX: lines mod {FIRST_WARP_READ_UNROLL} one at a time, then groups of "
                f"{FIRST_WARP_READ_UNROLL}; lacks the SASS schedule (ptxas unrolls to 16, 8 and 4 loads and sums "
                "between them)")
        if _misses(measured, model):
            lines = pcie.ceil_div(size, requester.LINE_BYTES)
            note += (f": {lines} lines took {measured / round_trip:.1f} round trips here, the PTX schedule "
                     f"{model / round_trip:.1f}; one warp does not queue at the completer")
        out.append(_row(source, machine, "one warp reads host memory (first kernel)", size, measured, model, "ns",
                        note=note))
    out += _copy_rows(sweeps.get("copy_queued_vs_size", []), link, source, machine, queued=True)
    out += _copy_rows(sweeps.get("copy_engine_vs_size", []), link, source, machine, queued=False)
    return out


def _misses(measured: float, model: float) -> bool:
    return abs(_error_pct(measured, model)) > GOAL_PCT


def _chains_row(point: dict, model: float, round_trip: float, service, service_ns: float, jitter_fit,
                params: Params, source: str, machine: str) -> dict:
    """One point of loads in flight, with the parameter it defines or what it rests on."""
    outstanding, measured = int(point["outstanding"]), point["loads_per_us"]
    fitted = ""
    if jitter_fit is not None and outstanding == jitter_fit[1]:
        fitted = "defines gpu.read_jitter_ns"
    elif service is not None and outstanding == service[1]:
        fitted = (f"defines gpu.read_service_ns ({service_ns:.3g} ns a read at the completer: a plateau of "
                  f"{1e3 / service_ns:.0f} loads/us)" if service_ns > 0 else
                  "defines gpu.read_service_ns: 0, this point is no slower than Little's law alone")
    note = fitted or "Little's law on the round trip; each warp step waits for its slowest lane (32 B sector reads)"
    if service is not None and not fitted and outstanding > requester.WARP_LANES:
        note += (f"; the warps queue at the completer, {service_ns:.3g} ns a read (fitted at {service[1]} in "
                 "flight): the round trip grows with the reads in flight")
    if model == params.gpu.read_tags * 1e3 / round_trip:
        note += f"; capped by gpu.read_tags ({params.gpu.read_tags} reads per round trip: an assumption)"
    if not fitted and outstanding > requester.WARP_LANES and _misses(measured, model):
        # a warp step as measured and as modelled: every warp steps at the same rate
        note += (f"; lacks the round trip's growth before the completer saturates: a warp step took "
                 f"{outstanding / measured:.2f} us here, the queue gives {outstanding / model:.2f} us")
    return _row(source, machine, f"host loads in flight: {outstanding}", None, measured, model, "loads/us",
                "fitted" if fitted else "prediction", note)


def _copy_rows(points: list[dict], link, source: str, machine: str, queued: bool) -> list[dict]:
    """Copies: a setup per copy (fitted at each direction's smallest size) + bytes at link rate.

    Queued copies (copy_queued_vs_size) time the copy engine alone. The first kernel's
    copies (copy_engine_vs_size) were synchronous copies between CUDA events, so their
    setup is the host's time to issue one copy (Python, driver) as well."""
    fits = requester.fit_copy_setups(points, link)
    out = []
    for point in points:
        direction, size = point["direction"], int(point["size_bytes"])
        setup_ns, fitted_size = fits[direction]     # the same point calibrate derives [params] from
        model = size / requester.copy_ns(size, setup_ns, requester.copy_rate_gbps(link, direction, size))
        fitted = size == fitted_size
        what = "queued copies" if queued else "one synchronous copy at a time"
        note = (f"defines gpu.copy_setup_{direction}_ns" if fitted else
                f"setup {setup_ns / 1e3:.3g} us + bytes at the link's {'read' if direction == 'h2d' else 'write'} rate")
        if not queued:
            note += "; the setup includes the host's issue of each copy"
        if not fitted and _misses(point["gbytes_per_s"], model):
            fitted_point = next(p for p in points if p["direction"] == direction and int(p["size_bytes"]) == fitted_size)
            note += (f"; lacks what changed the setup in this run: {size / point['gbytes_per_s'] / 1e3:.1f} us a "
                     f"copy here against {fitted_size / fitted_point['gbytes_per_s'] / 1e3:.1f} us for the fitted "
                     f"{fitted_size} B copy")
        out.append(_row(source, machine, f"copy engine {direction} ({what})", size, point["gbytes_per_s"], model,
                        "GB/s", "fitted" if fitted else "prediction", note))
    return out


def _at(size_bytes) -> str:
    """' at N B', or nothing for a measurement of no one size (a full-grid sweep)."""
    return "" if pd.isna(size_bytes) else f" at {int(size_bytes)} B"


def summary(frame: pd.DataFrame) -> str:
    """One line: how many counted predictions are within the goal, and which miss."""
    counted = frame[frame["within_goal"].notna()]
    misses = counted[counted["within_goal"] == False]  # noqa: E712 (a column of booleans and None)
    text = (f"{int((counted['within_goal'] == True).sum())} of {len(counted)} predictions for transfers of "  # noqa: E712
            f"{GOAL_MIN_BYTES} B and more are within {GOAL_PCT:g} %")
    if len(misses):
        text += "; misses: " + "; ".join(f"{r.machine} {r.quantity}{_at(r.size_bytes)} ({r.error_pct:+.0f} %)"
                                         for r in misses.itertuples())
    return text


def table(calibration_dir: Path | None = None) -> pd.DataFrame:
    """Every comparison, published NIC first, then each calibrate file (of
    ``calibration_dir``, default the checkout's, ``calibfiles.calibration_dir``)."""
    calibration_dir = calibfiles.calibration_dir() if calibration_dir is None else calibration_dir
    rows = pcie_bench_rows()
    for file in sorted(Path(calibration_dir).glob("*.toml")):
        data = _load_toml(file)
        if data.get("device", {}).get("simulator"):
            continue                        # the CUDA simulator's timings are not measurements
        rows += calibration_rows(file)
    return pd.DataFrame(rows)
