"""The fast discrete-event simulator: ``simulate(params, workload, seed) -> SimResult``.

A Run takes a Workload through a Path on a Topology: every message is issued by the GPU,
cut into MTU packets; each packet is admitted into the NIC's staging buffer (push paths
with ``hold``; the space comes back to the GPU a feedback delay after the packet left),
crosses PCIe into the NIC, waits for link credits (push with ``drop``: in a small
cut-through FIFO, and is lost when that overflows), is serialised onto the network link
and drained by the remote receiver (which may stall). A message completes when the CQE
of its last packet lands in GPU memory. Credits are taken per packet when it is sent and
return a delay after the receiver drained it; pull paths read without holding credits and
never drop. Same seed, same parameters: the same result, bit for bit.

Results are per-message records, a time series (bytes sent, held, in flight, delivered,
dropped; staging occupancy; credits; link utilisation) and a summary, as pandas objects.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from gpuwrite.model import _core
from gpuwrite.model import checks
from gpuwrite.model import paths
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import Params, SimConfig, Workload

PUSH_PATHS = ("gpu_push", "gpu_push_inline")
PS_PER_NS = 1000
# The cores keep times in int64 picoseconds below ``_core.INFINITY`` (2**62 ps, 53 days).
LATEST_NS = _core.INFINITY / PS_PER_NS


def _ps(value_ns) -> np.ndarray:
    return np.rint(np.asarray(value_ns, dtype=np.float64) * PS_PER_NS).astype(np.int64)


def _ps_steps(values_ns) -> np.ndarray:
    """One message's packet times (ns) in ps, rounded so that their running sums are the
    running sums in ns rounded once: the packets of a message follow one another on the
    PCIe ingress, the link and the receiver, and each rounded alone put a message of many
    packets up to half a picosecond per packet off its closed form (1.8 ns for 1 MiB in
    256-byte packets)."""
    through = _ps(np.cumsum(np.asarray(values_ns, dtype=np.float64)))
    return np.diff(through, prepend=0)


def message_sizes(workload: Workload, rng: np.random.Generator) -> np.ndarray:
    """Sizes of all messages, drawn from the workload's distribution."""
    n = workload.n_messages
    if workload.size_kind == "fixed":
        return np.full(n, workload.size_bytes, dtype=np.int64)
    if workload.size_kind == "choice":
        weights = np.asarray(workload.weights or [1.0] * len(workload.sizes_bytes), dtype=np.float64)
        return rng.choice(np.asarray(workload.sizes_bytes, dtype=np.int64), size=n, p=weights / weights.sum())
    return rng.integers(workload.min_bytes, workload.max_bytes + 1, size=n, dtype=np.int64)


SIZE_TABLE_SPAN = 1 << 20   # widest size range looked up in a table (8 MiB of counters)


def distinct_sizes(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(sizes, return_inverse=True)``: the distinct sizes, ascending, and each
    message's index among them. Sizes spanning at most ``SIZE_TABLE_SPAN`` bytes are
    looked up in a table indexed by size, in linear time, instead of sorting every message
    (half of ``prepare``'s time on millions of messages)."""
    if len(sizes) == 0 or int(sizes.max()) - int(sizes.min()) >= SIZE_TABLE_SPAN:
        unique, inverse = np.unique(sizes, return_inverse=True)
        return unique, inverse.astype(np.int64)
    low = int(sizes.min())
    offsets = sizes - low
    present = np.zeros(int(offsets.max()) + 1, bool)
    present[offsets] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return (np.flatnonzero(present) + low).astype(sizes.dtype), rank[offsets]


def open_arrivals_ps(workload: Workload, rng: np.random.Generator) -> np.ndarray:
    """Issue times of an open-loop workload."""
    n = workload.n_messages
    if workload.process == "periodic":
        arrivals_ns = np.arange(n) * workload.interval_ns
    else:
        gaps = rng.exponential(workload.interval_ns, size=n)
        gaps[0] = 0.0
        arrivals_ns = np.cumsum(gaps)
    if not arrivals_ns[-1] < LATEST_NS:
        raise ParamError("workload.interval_ns", workload.interval_ns,
                         f"about {LATEST_NS / n:.3g} ns or less with {n:,} messages (the last issue before "
                         f"{LATEST_NS:.3g} ns, 2**62 ps, the simulator's clock)")
    return _ps(arrivals_ns)


def open_qps(workload: Workload, rng: np.random.Generator) -> np.ndarray:
    """QP of each open-loop message: in turn, or drawn with ``qp_weights``."""
    if not workload.qp_weights:
        return np.arange(workload.n_messages, dtype=np.int64) % workload.n_qps
    weights = np.asarray(workload.qp_weights, dtype=np.float64)
    return rng.choice(workload.n_qps, size=workload.n_messages, p=weights / weights.sum()).astype(np.int64)


@dataclass(frozen=True)
class Inputs:
    """Everything the simulator cores consume: service times in ps, per size and per packet.

    Messages point into the per-size arrays (``size_index``); each size's packets are rows
    ``first_u[u] .. first_u[u] + count_u[u]`` of the packet tables (``pkt_*``).
    """

    sizes: np.ndarray
    open_arrival: np.ndarray
    open_qp: np.ndarray
    size_index: np.ndarray    # each message's index into the distinct sizes
    pre_u: np.ndarray
    post_u: np.ndarray
    first_u: np.ndarray
    count_u: np.ndarray
    pkt_ingress: np.ndarray
    pkt_wire: np.ndarray
    pkt_drain: np.ndarray
    pkt_credits: np.ndarray
    pkt_staging: np.ndarray
    pkt_bytes: np.ndarray
    pcie_bytes: dict          # per distinct size: wire bytes per message, by direction
    flight: int
    tail: int
    error_tail: int
    credit_return_delay: int
    staging_return_delay: int
    credits_total: int
    staging_capacity: int
    fifo_capacity: int
    is_push: bool
    hold: bool
    stall_period: int
    stall_duration: int
    stall_offset: int
    mode: int
    n_qps: int
    outstanding: int
    issue_gap: int
    round_robin: bool = False

    @property
    def n_packets(self) -> int:
        return int(self.count_u[self.size_index].sum())

    def per_message(self, column: np.ndarray) -> np.ndarray:
        """A per-packet-table column summed per message (e.g. staging or credits)."""
        per_size = np.add.reduceat(column, self.first_u) if len(column) else column
        return per_size[self.size_index]

    @property
    def staging_need(self) -> np.ndarray:
        return self.per_message(self.pkt_staging)

    @property
    def credits_need(self) -> np.ndarray:
        return self.per_message(self.pkt_credits)

    @property
    def wire(self) -> np.ndarray:
        return self.per_message(self.pkt_wire)


def prepare(params: Params, workload: Workload, seed: int) -> Inputs:
    """Draw the workload and turn the path model into per-size and per-packet service times."""
    # the seed goes into the summary and result tables: 64-bit signed, as a config file's
    seed = int(seed) if isinstance(seed, np.integer) else seed
    checks.check_seed(seed)
    rng = np.random.default_rng(seed)
    sizes = message_sizes(workload, rng)
    arrivals = open_arrivals_ps(workload, rng) if workload.arrival == "open" else np.zeros(0, np.int64)
    open_qp = open_qps(workload, rng) if workload.arrival == "open" else np.zeros(0, np.int64)
    topology = params.build_topology()
    unique, inverse = distinct_sizes(sizes)
    network = params.network
    # Every message is at least one packet and at most one per MTU of payload: bounded
    # before any path is timed (2000 messages of 2 GiB were a billion packets, and the
    # process was killed for memory after minutes).
    packets_per_size = np.maximum(1, -(-unique // network.mtu_bytes))
    n_packets = int(packets_per_size[inverse].sum())
    if n_packets > checks.MAX_PACKETS:
        raise ParamError("workload", f"{len(sizes):,} messages of {n_packets:,} packets",
                         f"at most {checks.MAX_PACKETS:,} packets in one simulation (messages x "
                         f"packets per message of network.mtu_bytes={network.mtu_bytes})")
    is_push = params.path in PUSH_PATHS
    hold = params.nic.policy == "hold"
    pre, post, first, count = [], [], [], []
    packets = {name: [] for name in ("ingress", "wire", "drain", "credits", "staging", "bytes")}
    pcie_per = {key: np.empty(len(unique), np.int64) for key in ("gpu_out", "gpu_in", "nic_in", "nic_out")}
    packets_ps = {name: [] for name in ("ingress", "wire", "drain")}
    timing = None
    for k, size in enumerate(unique.tolist()):
        timing = paths.path_timing(params.path, topology, size, params)
        pre.append(timing.stage_ns("pre"))
        post.append(timing.stage_ns("post"))
        first.append(len(packets["wire"]))
        count.append(len(timing.packet_wire_ns))
        packets["ingress"] += timing.packet_ingress_ns
        packets["wire"] += timing.packet_wire_ns
        packets["drain"] += timing.packet_drain_ns
        packets["credits"] += timing.packet_credits
        packets["staging"] += timing.packet_staging_bytes
        packets["bytes"] += timing.packet_payload_bytes
        packets_ps["ingress"].append(_ps_steps(timing.packet_ingress_ns))
        packets_ps["wire"].append(_ps_steps(timing.packet_wire_ns))
        packets_ps["drain"].append(_ps_steps(timing.packet_drain_ns))
        if is_push and hold and max(timing.packet_staging_bytes) > params.nic.staging_buffer_bytes:
            raise ParamError("nic.staging_buffer_bytes", params.nic.staging_buffer_bytes,
                             f"at least one packet's staged bytes ({max(timing.packet_staging_bytes)} on "
                             f"{params.path}, header included)")
        if max(timing.packet_credits) > network.credits_total:
            raise ParamError("network.vl_buffer_bytes", network.vl_buffer_bytes,
                             f"at least one packet ({max(timing.packet_credits)} credits of "
                             f"{network.credit_block_bytes} B)")
        for key, value in paths.pcie_bytes(params.path, topology, size, params).items():
            pcie_per[key][k] = value
    tail = timing.stage_ns("tail")
    error_tail = tail - network.propagation_ns  # an error CQE: no acknowledgement to wait for
    receiver = params.receiver
    _check_run_fits(workload, sizes, arrivals, inverse, pre, post, tail, packets, first, timing, params)
    return Inputs(
        sizes=sizes, open_arrival=arrivals, open_qp=open_qp, size_index=inverse,
        pre_u=_ps(pre), post_u=_ps(post), first_u=np.asarray(first, np.int64), count_u=np.asarray(count, np.int64),
        pkt_ingress=np.concatenate(packets_ps["ingress"]), pkt_wire=np.concatenate(packets_ps["wire"]),
        pkt_drain=np.concatenate(packets_ps["drain"]),
        pkt_credits=np.asarray(packets["credits"], np.int64), pkt_staging=np.asarray(packets["staging"], np.int64),
        pkt_bytes=np.asarray(packets["bytes"], np.int64), pcie_bytes=pcie_per,
        flight=int(_ps(network.propagation_ns)), tail=int(_ps(tail)), error_tail=int(_ps(error_tail)),
        credit_return_delay=int(_ps(timing.credit_return_ns)),
        staging_return_delay=int(_ps(timing.staging_return_ns)),
        credits_total=network.credits_total, staging_capacity=params.nic.staging_buffer_bytes,
        fifo_capacity=params.nic.fifo_bytes, is_push=is_push, hold=hold,
        stall_period=int(_ps(receiver.stall_period_ns)), stall_duration=int(_ps(receiver.stall_duration_ns)),
        # only the offset within a period matters (the windows repeat), and it fits the clock
        stall_offset=int(_ps(receiver.stall_offset_ns % receiver.stall_period_ns if receiver.stall_period_ns > 0
                             else 0.0)),
        mode=_core.MODE_OPEN if workload.arrival == "open" else _core.MODE_CLOSED,
        n_qps=workload.n_qps, outstanding=workload.outstanding, issue_gap=int(_ps(workload.issue_gap_ns)),
        round_robin=params.nic.scheduler == "round_robin",
    )


def _check_run_fits(workload, sizes, arrivals, inverse, pre, post, tail, packets, first, timing, params) -> None:
    """A ParamError unless every time of the run stays below ``LATEST_NS``: an upper bound
    on the last completion is the last issue plus every service and every delay of every
    message and packet one after the other (a time past int64 wrapped round, silently)."""
    network, receiver = params.network, params.receiver
    drain = np.asarray(packets["drain"], np.float64)
    if receiver.stall_period_ns > 0 and receiver.stall_duration_ns > 0:
        drain = drain / receiver.duty_cycle + 2 * receiver.stall_period_ns     # and the windows it meets
    staging_return = timing.staging_return_ns if params.path in PUSH_PATHS and params.nic.policy == "hold" else 0.0
    per_packet = (np.asarray(packets["ingress"], np.float64) + np.asarray(packets["wire"], np.float64) + drain
                  + network.propagation_ns + timing.credit_return_ns + staging_return)
    per_size = np.add.reduceat(per_packet, np.asarray(first, np.int64)) + np.asarray(pre) + np.asarray(post) + tail
    busy_ns = float(np.bincount(inverse, minlength=len(per_size)) @ per_size)
    if workload.arrival == "open":
        last_issue_ns = float(arrivals[-1]) / PS_PER_NS
    else:
        last_issue_ns = workload.issue_gap_ns * min(len(sizes), workload.n_qps * workload.outstanding)
    if not busy_ns + last_issue_ns < LATEST_NS:
        raise ParamError("simulated time", f"up to {busy_ns + last_issue_ns:.3g} ns",
                         f"under {LATEST_NS:.3g} ns (2**62 ps, the simulator's clock): fewer messages, "
                         "or shorter delays and faster rates")


RECORD_FIELDS = ("qp", "arrival", "reserve", "at_nic", "tx_start", "tx_end", "drain_end", "done")
PACKET_FIELDS = ("p_table", "p_reserve", "p_ready", "p_tx_start", "p_drain_end")


def new_records(inputs: Inputs) -> dict[str, np.ndarray]:
    """Zeroed output arrays: per message (``RECORD_FIELDS``, dropped) and per packet."""
    n = len(inputs.sizes)
    out = {name: np.zeros(n, np.int64) for name in RECORD_FIELDS}
    out["dropped"] = np.zeros(n, np.int8)
    total = inputs.n_packets
    out.update({name: np.zeros(total, np.int64) for name in PACKET_FIELDS})
    return out


def run_fast(inputs: Inputs) -> dict[str, np.ndarray]:
    """Run the numba core on prepared inputs; per-message and per-packet arrays (ps)."""
    out = new_records(inputs)
    common = (inputs.mode, inputs.open_arrival, inputs.open_qp, inputs.n_qps, inputs.outstanding, inputs.issue_gap,
              inputs.size_index, inputs.pre_u, inputs.post_u, inputs.first_u, inputs.count_u,
              inputs.pkt_ingress, inputs.pkt_wire, inputs.pkt_drain, inputs.pkt_credits, inputs.pkt_staging)
    records = (out["qp"], out["arrival"], out["reserve"], out["at_nic"], out["tx_start"], out["tx_end"],
               out["drain_end"], out["done"])
    packets = tuple(out[name] for name in PACKET_FIELDS)
    if inputs.round_robin:
        _core.run_core_round_robin(
            *common, inputs.flight, inputs.tail, inputs.credit_return_delay, inputs.staging_return_delay,
            inputs.credits_total, inputs.staging_capacity,
            inputs.stall_period, inputs.stall_duration, inputs.stall_offset, *records, *packets)
        return out
    _core.run_core(*common, inputs.pkt_bytes, inputs.flight, inputs.tail, inputs.error_tail,
                   inputs.credit_return_delay, inputs.staging_return_delay,
                   inputs.credits_total, inputs.staging_capacity, inputs.fifo_capacity, inputs.is_push, inputs.hold,
                   inputs.stall_period, inputs.stall_duration, inputs.stall_offset,
                   *records, out["dropped"], *packets)
    return out


@dataclass
class SimResult:
    """One Run: per-message records, time series and summary (pandas)."""

    params: Params
    workload: Workload
    seed: int
    inputs: Inputs
    raw: dict = field(repr=False)

    @cached_property
    def messages(self) -> pd.DataFrame:
        """One row per message, in issue order; times in ns; NaN where a dropped message never got."""
        raw, inputs = self.raw, self.inputs
        dropped = raw["dropped"].astype(bool)

        def ns(name):
            values = raw[name].astype(np.float64) / PS_PER_NS
            if name in ("tx_start", "tx_end", "drain_end"):
                values[dropped] = np.nan
            return values

        frame = pd.DataFrame({
            "message": np.arange(len(inputs.sizes)),
            "qp": raw["qp"],
            "size_bytes": inputs.sizes,
            "credits": inputs.credits_need,
            **{f"{name}_ns": ns(name) for name in RECORD_FIELDS[1:]},
            "dropped": dropped,
        })
        frame["received_ns"] = frame["tx_end_ns"] + inputs.flight / PS_PER_NS
        frame["credit_return_ns"] = frame["drain_end_ns"] + inputs.credit_return_delay / PS_PER_NS
        frame["latency_ns"] = frame["done_ns"] - frame["arrival_ns"]
        return frame

    @cached_property
    def latencies_ps(self) -> np.ndarray:
        return self.raw["done"] - self.raw["arrival"]

    def timeseries(self, samples: int | None = None) -> pd.DataFrame:
        """Books at evenly spaced times: sent = delivered + in flight + held + dropped."""
        raw, inputs = self.raw, self.inputs
        if samples is None:
            samples = self.workload.samples
        else:
            # 0 silently meant the workload's count, -5 and 2.5 raised numpy's errors, 10**9
            # tried to allocate gigabytes: the same bounds as a workload's samples
            checks.check_samples(samples)
        # Per packet: a dropped message's packets sent before the loss drain (and return
        # their credits) after every message-level time, so the books must run past them.
        end = int(max(raw["done"].max(), raw["p_drain_end"].max() + inputs.credit_return_delay))
        times = np.linspace(0, end, samples + 1)[1:].astype(np.int64)
        sizes = inputs.sizes
        dropped = raw["dropped"].astype(bool)
        sent = ~dropped

        def cumulative(event_ps, weights, mask):
            order = np.argsort(event_ps[mask], kind="stable")
            keys = event_ps[mask][order]
            cum = np.concatenate([[0], np.cumsum(weights[mask][order])])
            return cum[np.searchsorted(keys, times, side="right")]

        at_nic_all = cumulative(raw["at_nic"], sizes, np.ones(len(sizes), bool))
        accepted = cumulative(raw["at_nic"], sizes, sent)
        left_nic = cumulative(raw["tx_end"], sizes, sent)
        received = cumulative(raw["tx_end"] + inputs.flight, sizes, sent)
        lost = cumulative(raw["at_nic"], sizes, dropped)
        staging_in, staging_out, staging_w = self._staging_events()
        staging = (cumulative(staging_in, staging_w, np.ones(len(staging_w), bool))
                   - cumulative(staging_out, staging_w, np.ones(len(staging_w), bool)))
        taken, back, credit_w = self._credit_events()
        every = np.ones(len(credit_w), bool)
        credits_out = cumulative(taken, credit_w, every) - cumulative(back, credit_w, every)
        # link busy time up to each sample (packets in sending order), then utilisation per interval
        sent_packets = raw["p_tx_start"] >= 0
        on_link = np.argsort(raw["p_tx_start"][sent_packets], kind="stable")
        tx_start = raw["p_tx_start"][sent_packets][on_link]
        wire = inputs.pkt_wire[raw["p_table"][sent_packets]][on_link]
        cum_wire = np.concatenate([[0], np.cumsum(wire)])
        index = np.searchsorted(tx_start, times, side="right")  # packets started by then
        busy = cum_wire[index].astype(np.float64)
        last = np.maximum(index - 1, 0)
        overrun = np.where(index > 0, tx_start[last] + wire[last] - times, 0) if len(wire) else np.zeros(len(times))
        busy -= np.clip(overrun, 0, None)
        previous = np.concatenate([[0], times[:-1]])
        busy_before = np.concatenate([[0.0], busy[:-1]])
        utilisation = (busy - busy_before) / np.maximum(times - previous, 1)
        return pd.DataFrame({
            "time_ns": times / PS_PER_NS,
            "sent_bytes": at_nic_all,
            "held_bytes": accepted - left_nic,
            "in_flight_bytes": left_nic - received,
            "delivered_bytes": received,
            "dropped_bytes": lost,
            "staging_bytes": staging,
            "credits_available": inputs.credits_total - credits_out,
            "link_utilisation": utilisation,
        })

    def _staging_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(taken, given back, bytes) per packet of the NIC's staging or FIFO space.

        Push with hold: reserved by the GPU, back when the GPU sees it freed. Push with
        drop: the cut-through FIFO, from the packet's arrival until it starts sending.
        """
        raw, inputs = self.raw, self.inputs
        sent = raw["p_tx_start"] >= 0
        rows = raw["p_table"][sent]
        if inputs.is_push and inputs.hold:
            back = raw["p_tx_start"][sent] + inputs.pkt_wire[rows] + inputs.staging_return_delay
            return raw["p_reserve"][sent], back, inputs.pkt_staging[rows]
        if inputs.is_push:
            return raw["p_ready"][sent], raw["p_tx_start"][sent], inputs.pkt_bytes[rows]
        empty = np.zeros(0, np.int64)
        return empty, empty, empty

    def _credit_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(taken, back, credits) per sent packet: taken when sent, back after the update delay."""
        raw, inputs = self.raw, self.inputs
        sent = raw["p_tx_start"] >= 0
        back = raw["p_drain_end"][sent] + inputs.credit_return_delay
        return raw["p_tx_start"][sent], back, inputs.pkt_credits[raw["p_table"][sent]]

    @staticmethod
    def _peak(taken: np.ndarray, back: np.ndarray, weights: np.ndarray) -> int:
        """Exact largest sum of weights held at once; what comes back at t is free at t."""
        if len(weights) == 0:
            return 0
        times = np.concatenate([back, taken])
        deltas = np.concatenate([-weights, weights])
        # give-backs come first in ``times``, and a stable sort keeps them first at equal
        # times; sorting the times alone (two nearly sorted runs) is cheaper than a lexsort
        order = np.argsort(times, kind="stable")
        return int(max(0, np.cumsum(deltas[order]).max()))

    @cached_property
    def drained_gbps(self) -> float:
        """The delivered bytes over the span from the first message's arrival until the
        receiver drained the last of them (``drain_end``, where the cores' receiver finished
        the message's last packet): at most the receiver's drain rate, which
        ``throughput_gbps`` is not. The same bytes and the same start as it, so never more
        than it; with a receiver as fast as the link the two differ by one packet's drain.
        Kept out of ``summary``, whose keys are the columns of the sweeps' stored tables."""
        raw, inputs = self.raw, self.inputs
        ok = raw["dropped"] == 0
        if not ok.any():
            return 0.0
        span_ps = raw["drain_end"][ok].max() - raw["arrival"].min()
        return int(inputs.sizes[ok].sum()) * 8.0 * PS_PER_NS / span_ps if span_ps > 0 else 0.0

    @cached_property
    def summary(self) -> pd.Series:
        """Latency percentiles, throughput, drops, PCIe bytes per direction, peak buffer use.

        ``throughput_gbps`` is the delivered bytes over the span from the first message's
        arrival to the last one's reception at the remote NIC, not its drain into the
        receiver's memory: a short run into a slow receiver can report more than the drain
        rate while the receive buffer absorbs the difference (a long run converges to it).
        ``drained_gbps`` (a property beside this) counts them until they were drained."""
        raw, inputs = self.raw, self.inputs
        dropped = raw["dropped"].astype(bool)
        ok = ~dropped
        latency_ns = self.latencies_ps[ok] / PS_PER_NS
        received = raw["tx_end"][ok] + inputs.flight
        span_ps = (received.max() - raw["arrival"].min()) if ok.any() else 0
        delivered_bytes = int(inputs.sizes[ok].sum())
        out = {
            "path": self.params.path,
            "topology": self.params.topology,
            "policy": self.params.nic.policy,
            "scheduler": self.params.nic.scheduler,
            "seed": self.seed,
            "messages": len(inputs.sizes),
            "delivered": int(ok.sum()),
            "dropped": int(dropped.sum()),
            "dropped_bytes": int(inputs.sizes[dropped].sum()),
            "delivered_bytes": delivered_bytes,
            "duration_ns": span_ps / PS_PER_NS,
            "throughput_gbps": delivered_bytes * 8.0 * PS_PER_NS / span_ps if span_ps > 0 else 0.0,
            "messages_per_s": ok.sum() * 1e12 / span_ps if span_ps > 0 else 0.0,
            "latency_mean_ns": float(latency_ns.mean()) if ok.any() else float("nan"),
        }
        for q in (50, 90, 99, 99.9):
            out[f"latency_p{q:g}_ns"] = float(np.percentile(latency_ns, q)) if ok.any() else float("nan")
        out["latency_max_ns"] = float(latency_ns.max()) if ok.any() else float("nan")
        out["staging_peak_bytes"] = self._peak(*self._staging_events())
        out["credits_min"] = inputs.credits_total - self._peak(*self._credit_events())
        # pushed payloads cross PCIe even when the NIC then drops them
        counted = np.ones(len(ok), bool) if inputs.is_push else ok
        per_size = np.bincount(inputs.size_index[counted], minlength=len(inputs.pcie_bytes["gpu_out"]))
        for key, per_message in inputs.pcie_bytes.items():
            out[f"pcie_{key}_bytes"] = int(per_size @ per_message)
        return pd.Series(out)


def simulate(params: Params, workload: Workload, seed: int = 0) -> SimResult:
    """Run ``workload`` through ``params.path`` on ``params.topology``; deterministic for a seed."""
    inputs = prepare(params, workload, seed)
    return SimResult(params, workload, int(seed), inputs, run_fast(inputs))


def simulate_config(config: SimConfig) -> SimResult:
    return simulate(config.params, config.workload, config.seed)
