"""The GPU as a PCIe requester: closed forms for what ``gpuwrite calibrate``'s sweeps measure.

Each function is one mechanism, used by gpuwrite/model/validation.py to predict a sweep
and by gpuwrite/bench/calib.py to derive the parameter a sweep defines:

* **a warp waits for its slowest lane.** Lanes that load different lines send separate
  read requests; the load instruction completes when the last one returns. With round
  trips of mean ``round_trip_ns`` and an exponential tail of scale ``jitter_ns``
  (``gpu.read_jitter_ns``), the expected slowest of ``m`` is the mean plus
  ``jitter_ns x (H_m - 1)`` (H_m the m-th harmonic number: the expected maximum of m
  exponentials is their scale times H_m).
* **Little's law on the read round trip**: ``n`` dependent chains in flight complete
  ``n / round trip`` loads per unit time, until the requester's tags (``gpu.read_tags``
  per round trip) or the link's rate for that request size.
* **the round trip grows with the reads in flight**: every read also passes one shared
  completer (the root complex's path to host memory) that serves one read per
  ``gpu.read_service_ns``. The warps in flight form a closed queueing network, each warp
  one customer (its loads leave together and it waits for the last): the rest of the
  step is a delay, the completer a queue. Exact mean value analysis (Reiser and
  Lavenberg, "Mean-value analysis of closed multichain queuing networks", JACM 27(2),
  1980) gives the throughput: Little's law at one warp, approaching ``1 / service`` from
  below as warps are added.
* **a warp's reads in flight**: a warp that reads ``size`` bytes as 128-byte lines,
  ``lines_in_flight`` at a time (the kernel's structure), pays per group the slowest of
  its reads (the first mechanism again), then the group's bytes at the link's rate.
* **a copy-engine copy**: a fixed setup (``gpu.copy_setup_h2d_ns`` / ``_d2h_ns``) plus
  its bytes at the link's DMA rate.
"""
from __future__ import annotations

from gpuwrite.model import pcie
from gpuwrite.model.errors import ParamError
from gpuwrite.model.ordered import sum_in_order

WARP_LANES = 32
LINE_BYTES = 128     # one L2 line: what a warp's coalesced load of 32 words asks for
# A lane's 4-byte load alone asks for one 32-byte L2 sector, not the whole line:
# assumption after EMOGI (Min et al., VLDB 2021), which saw GPU zero-copy reads of host
# memory leave as 32 to 128 B PCIe requests, one 32 B sector per sector touched.
SECTOR_BYTES = 32


def harmonic(m: int) -> float:
    """H_m = 1 + 1/2 + ... + 1/m."""
    if m < 1:
        raise ParamError("lanes", m, "an integer >= 1")
    return sum_in_order(1.0 / k for k in range(1, m + 1))


def slowest_lane_ns(round_trip_ns: float, jitter_ns: float, lanes: int) -> float:
    """Expected time until the slowest of ``lanes`` concurrent reads returns."""
    return round_trip_ns + jitter_ns * (harmonic(lanes) - 1.0)


def jitter_from_lanes(lanes: int, step_ns: float, round_trip_ns: float) -> float:
    """``gpu.read_jitter_ns`` from one measured warp step of ``lanes`` reads (inverse of
    ``slowest_lane_ns``); 0 where the step is no slower than one round trip."""
    if lanes < 2:
        raise ParamError("lanes", lanes, "an integer >= 2 (one lane has no slowest)")
    return max(0.0, (step_ns - round_trip_ns) / (harmonic(lanes) - 1.0))


def chains_loads_per_us(outstanding: int, round_trip_ns: float, jitter_ns: float, link: pcie.LinkConfig,
                        tags: int, request_bytes: int = SECTOR_BYTES, service_ns: float = 0.0) -> float:
    """Loads per us of ``outstanding`` dependent chains, one per lane (calib._load_chains):
    each warp step waits for its slowest lane, and the warps queue at the completer
    (``service_ns`` per read, ``gpu.read_service_ns``; 0: no queue); capped by the
    requester's ``tags`` (each held for one round trip: Little's law) and by the link for
    ``request_bytes`` reads."""
    if outstanding < 1:
        raise ParamError("outstanding", outstanding, "an integer >= 1")
    step_ns = slowest_lane_ns(round_trip_ns, jitter_ns, min(outstanding, WARP_LANES))
    link_per_us = pcie.effective_rate_gbps(link, "read", request_bytes) * 1e3 / (request_bytes * 8)
    return min(completer_loads_per_us(outstanding, step_ns, service_ns), tags * 1e3 / round_trip_ns, link_per_us)


def completer_loads_per_us(outstanding: int, step_ns: float, service_ns: float) -> float:
    """Loads per us of ``outstanding`` chains, one per lane, whose warps (``step_ns`` a step
    alone) queue at one completer that serves a read in ``service_ns`` (exact MVA).

    ``ceil(outstanding / 32)`` warps each bring ``outstanding / warps`` reads a step: a
    service demand of that many reads; the rest of the step (``step_ns`` minus the demand)
    is a delay no warp waits for. ``service_ns`` 0 is no completer: ``outstanding / step``."""
    if outstanding < 1:
        raise ParamError("outstanding", outstanding, "an integer >= 1")
    if step_ns <= 0 or service_ns < 0:
        raise ParamError("service_ns", service_ns, f">= 0, with a step of > 0 ns (step {step_ns})")
    warps = pcie.ceil_div(outstanding, WARP_LANES)
    lanes = outstanding / warps
    demand_ns = lanes * service_ns
    delay_ns = max(0.0, step_ns - demand_ns)
    queued = 0.0            # mean warps at the completer, one fewer warp in the network
    for population in range(1, warps + 1):
        response_ns = demand_ns * (1.0 + queued)    # arrival theorem: it finds the queue of n - 1
        steps_per_ns = population / (delay_ns + response_ns)
        queued = steps_per_ns * response_ns
    return lanes * steps_per_ns * 1e3


def _group_ns(lines: int, round_trip_ns: float, jitter_ns: float, line_rate_gbps: float) -> float:
    """One group of ``lines`` line reads issued together: its slowest read, then its bytes."""
    return slowest_lane_ns(round_trip_ns, jitter_ns, lines) + lines * LINE_BYTES * 8.0 / line_rate_gbps


def warp_read_ns(size_bytes: int, lines_in_flight: int, round_trip_ns: float, jitter_ns: float,
                 link: pcie.LinkConfig) -> float:
    """One warp reads ``size_bytes`` as 128-byte lines, ``lines_in_flight`` at a time
    (calib._warp_read_lines): each group waits for its slowest line, then its bytes cross
    the link at its rate for 128-byte reads."""
    if lines_in_flight < 1:
        raise ParamError("lines_in_flight", lines_in_flight, "an integer >= 1")
    lines = pcie.ceil_div(max(size_bytes, 1), LINE_BYTES)
    full, rest = divmod(lines, lines_in_flight)
    rate = pcie.effective_rate_gbps(link, "read", LINE_BYTES)
    total = full * _group_ns(lines_in_flight, round_trip_ns, jitter_ns, rate)
    return total + (_group_ns(rest, round_trip_ns, jitter_ns, rate) if rest else 0.0)


def unrolled_loop_read_ns(size_bytes: int, unroll: int, round_trip_ns: float, jitter_ns: float,
                          link: pcie.LinkConfig) -> float:
    """The first kernel (calib._warp_read, ``total += src[k]`` per lane): its PTX for sm_90
    runs ``lines mod unroll`` iterations one at a time, then groups of ``unroll`` loads."""
    lines = pcie.ceil_div(max(size_bytes, 1), LINE_BYTES)
    serial = lines % unroll
    single = warp_read_ns(LINE_BYTES, 1, round_trip_ns, jitter_ns, link)
    rest = (warp_read_ns((lines - serial) * LINE_BYTES, unroll, round_trip_ns, jitter_ns, link)
            if lines > serial else 0.0)
    return serial * single + rest


def copy_ns(size_bytes: int, setup_ns: float, rate_gbps: float) -> float:
    """One copy-engine copy: its setup, then its bytes at ``rate_gbps``."""
    return setup_ns + size_bytes * 8.0 / rate_gbps


def copy_setup_from_point(size_bytes: int, gbytes_per_s: float, rate_gbps: float) -> float:
    """``gpu.copy_setup_*_ns`` from one measured copy (inverse of ``copy_ns``), floored at 0."""
    if gbytes_per_s <= 0:
        raise ParamError("gbytes_per_s", gbytes_per_s, "a measured rate > 0")
    return max(0.0, size_bytes / gbytes_per_s - size_bytes * 8.0 / rate_gbps)


def fit_read_jitter(points: list[dict], round_trip_ns: float) -> tuple[float, int] | None:
    """(``gpu.read_jitter_ns``, the point used) from a ``host_loads_vs_outstanding`` sweep:
    its largest point of one warp or less (2 to 32 loads in flight); None without one."""
    within = [p for p in points if 2 <= int(p["outstanding"]) <= WARP_LANES and p["loads_per_us"] > 0]
    if not within:
        return None
    point = max(within, key=lambda p: int(p["outstanding"]))
    lanes = int(point["outstanding"])
    return jitter_from_lanes(lanes, lanes * 1e3 / point["loads_per_us"], round_trip_ns), lanes


def fit_read_service(points: list[dict], round_trip_ns: float, jitter_ns: float) -> tuple[float, int] | None:
    """(``gpu.read_service_ns``, the point used) from a ``host_loads_vs_outstanding`` sweep:
    its largest point (the plateau, where the completer is busiest), if it has more than
    one warp in flight; the service time whose queue gives that point's rate exactly
    (0 where the point is no slower than Little's law alone); None without such a point."""
    beyond = [p for p in points if int(p["outstanding"]) > WARP_LANES and p["loads_per_us"] > 0]
    if not beyond:
        return None
    point = max(beyond, key=lambda p: int(p["outstanding"]))
    outstanding, measured = int(point["outstanding"]), float(point["loads_per_us"])
    step_ns = slowest_lane_ns(round_trip_ns, jitter_ns, WARP_LANES)
    if completer_loads_per_us(outstanding, step_ns, 0.0) <= measured:
        return 0.0, outstanding
    # the rate falls as the service time grows; at 1e3 / measured ns even the plateau is the point
    low, high = 0.0, 1e3 / measured
    for _ in range(64):     # 2^-64 of the bracket: the point is reproduced to rounding
        middle = (low + high) / 2
        if completer_loads_per_us(outstanding, step_ns, middle) > measured:
            low = middle
        else:
            high = middle
    return (low + high) / 2, outstanding


def copy_rate_gbps(link: pcie.LinkConfig, direction: str, size_bytes: int) -> float:
    """The link's rate for one copy: H2D is the copy engine's DMA reads, D2H its writes."""
    if direction not in ("h2d", "d2h"):
        raise ParamError("direction", direction, "h2d or d2h")
    return pcie.effective_rate_gbps(link, "read" if direction == "h2d" else "write", size_bytes)


def fit_copy_setups(points: list[dict], link: pcie.LinkConfig) -> dict[str, tuple[float, int]]:
    """{direction: (setup ns, the size used)} from a copy sweep's smallest size per direction."""
    out = {}
    for direction in ("h2d", "d2h"):
        mine = [p for p in points if p["direction"] == direction]
        if mine:
            point = min(mine, key=lambda p: int(p["size_bytes"]))
            size = int(point["size_bytes"])
            out[direction] = (copy_setup_from_point(size, point["gbytes_per_s"], copy_rate_gbps(link, direction, size)),
                              size)
    return out
