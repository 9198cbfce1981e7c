"""The four data paths as sequences of steps, and their analytical latency and throughput.

A message's life on every path has the same shape, which the simulator reuses:

    pre      fixed delays before the payload moves (issue, doorbell, WQE fetch)
    ingress  the payload crosses PCIe into the NIC: occupies the narrowest PCIe link
    post     fixed delays after it (propagation over the tree, read round trip)
    wire     the NIC serialises the message onto the network link (after credits)
    flight   propagation to the remote NIC
    tail     the acknowledgement returns and the NIC writes the CQE into GPU memory

The network's unit is the packet (MTU): the NIC forwards each packet once its bytes are
in (cut-through), on every path alike, and takes the packet's link credits (64-byte
blocks) only when it sends it. The ``wire`` stage is therefore the part of the message's
serialisation that does not overlap its PCIe ingress. Serialisation over the PCIe tree is
counted once, at the narrowest link (cut-through switches).

Reads (nic_pull's payload, host_staged's bounce buffer) go through the NIC's read engine:
at most ``nic.read_outstanding`` requests of up to MRRS bytes in flight, each occupying the
engine for ``read_request_ns`` (its issue cost, or a fixed part plus a part per byte where
the machine has one), so its bandwidth is
min(link, outstanding bytes / read round trip, request bytes / time per request), and the
platform's optional P2P read cap (``platform.p2p_read_cap_gbps``).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from itertools import accumulate

import numpy as np
from numba import njit

from gpuwrite import MAX_MESSAGE_BYTES
from gpuwrite.model import nic as nicmod
from gpuwrite.model import pcie
from gpuwrite.model import topology as topo
from gpuwrite.model.errors import ParamError, check_choice
from gpuwrite.model.ordered import sum_in_order
from gpuwrite.model.params import PATHS, Params

STAGES = ("pre", "ingress", "post", "wire", "flight", "tail")


@dataclass(frozen=True)
class Step:
    """One step of a path: what happens, how long it takes at zero load, its stage."""

    name: str
    latency_ns: float
    stage: str


@dataclass(frozen=True)
class Transfer:
    """One PCIe transaction of a path: ``requester`` reads from or writes to ``target``."""

    name: str
    requester: str
    target: str
    operation: str
    size_bytes: int
    count: int = 1


@dataclass(frozen=True)
class PathTiming:
    """A path at one message size: its steps, stage sums, and what it costs the link."""

    path: str
    size_bytes: int
    steps: tuple[Step, ...]
    transfers: tuple[Transfer, ...]
    drain_ns: float
    credits: int
    packet_payload_bytes: tuple[int, ...] = ()
    packet_ingress_ns: tuple[float, ...] = ()   # each packet's share of the ingress stage
    packet_wire_ns: tuple[float, ...] = ()
    packet_drain_ns: tuple[float, ...] = ()
    packet_credits: tuple[int, ...] = ()
    packet_staging_bytes: tuple[int, ...] = ()  # staging space each packet reserves (push)
    staging_return_ns: float = 0.0              # staging credit feedback to the GPU (push)
    credit_return_ns: float = 0.0               # receiver drained -> sender has the credits

    @property
    def wire_busy_ns(self) -> float:
        """Time the network link is busy with this message (all its packets)."""
        return sum_in_order(self.packet_wire_ns)

    def stage_ns(self, stage: str) -> float:
        return sum_in_order(step.latency_ns for step in self.steps if step.stage == stage)

    @property
    def latency_ns(self) -> float:
        return sum_in_order(step.latency_ns for step in self.steps)


def _ser_ns(route: topo.Route, operation: str, size_bytes: int, cap_gbps: float | None = None) -> float:
    if size_bytes == 0:
        return 0.0
    _, rate = route.narrowest(operation, size_bytes)
    if cap_gbps is not None:
        rate = min(rate, cap_gbps)
    return size_bytes * 8.0 / rate


def _posted_after_ns(route: topo.Route, size_bytes: int) -> float:
    """A small write that follows the payload on the same link costs only its serialisation."""
    link = route.pcie_links()[0].pcie
    return pcie.serialization_ns(pcie.write_wire_bytes(link, size_bytes).data_direction_bytes,
                                 pcie.tlp_rate_gbps(link))


def _doorbell_ns(route: topo.Route) -> float:
    """The doorbell write follows the payload on the same link: one TLP's serialisation."""
    return _posted_after_ns(route, nicmod.DOORBELL_BYTES)


def _read_round_trip_ns(route: topo.Route, target: topo.Node) -> float:
    return 2.0 * route.one_way_latency_ns + target.latency_ns


def read_request_ns(nic: nicmod.NicParams, request_bytes: float) -> float:
    """The read engine's time per request of ``request_bytes``, requests back to back:
    max(issue cost, fixed + bytes x per byte); 0 where the engine has neither cost."""
    per_bytes = nic.read_engine_fixed_ns + request_bytes * nic.read_engine_per_byte_ns
    return max(nic.read_request_overhead_ns, per_bytes)


def read_engine_gbps(route: topo.Route, target: topo.Node, size_bytes: int, params: Params) -> float:
    """Bandwidth of the NIC's read engine for reads of ``size_bytes`` over ``route``.

    Little's law on the outstanding requests: bytes in flight / read round trip, capped
    by the narrowest link (completions and requests, pcie.effective_rate_gbps), by the
    engine's time per request (``read_request_ns``), and by the platform's P2P read cap if
    one is set.
    """
    if size_bytes <= 0:
        return float("inf")
    link = route.pcie_links()[0].pcie
    request_bytes = size_bytes / pcie.read_request_count(link, size_bytes)
    _, link_rate = route.narrowest("read", size_bytes)
    # the engine keeps its requests outstanding across messages, so saturated reads of any
    # size fill the window: outstanding x request size in flight per round trip
    in_flight_bytes = params.nic.read_outstanding * request_bytes
    rate = min(link_rate, in_flight_bytes * 8.0 / _read_round_trip_ns(route, target))
    per_request_ns = read_request_ns(params.nic, request_bytes)
    if per_request_ns > 0:
        rate = min(rate, request_bytes * 8.0 / per_request_ns)
    return rate


def read_ns(route: topo.Route, target: topo.Node, size_bytes: int, params: Params) -> tuple[float, float]:
    """(busy, first-byte) of one read: the engine's time per read at its bandwidth, and the
    rest of the zero-load time until the last byte is in (round trip, first requests)."""
    if size_bytes <= 0:
        return 0.0, 0.0
    curve = _read_curve(route, target, size_bytes, params)
    busy = size_bytes * 8.0 / curve[3]
    return busy, max(0.0, _read_stream_ns(curve, size_bytes) - busy)


def _read_curve(route: topo.Route, target: topo.Node, size_bytes: int, params: Params) -> tuple:
    """(round trip, rate of the first window's completions, window bytes, engine rate) of
    one read of ``size_bytes`` (> 0): what ``read_ns`` and ``read_arrivals_ns`` follow."""
    _, link_rate = route.narrowest("read", size_bytes)
    if params.nic.read_stream_gbps > 0:
        link_rate = min(link_rate, params.nic.read_stream_gbps)
    window = params.nic.read_outstanding * params.link.mrrs_bytes
    return (_read_round_trip_ns(route, target), link_rate, window,
            read_engine_gbps(route, target, size_bytes, params))


def _read_stream_ns(curve: tuple, offset: float) -> float:
    """Zero load: the first window's completions follow one round trip at link rate; beyond
    the window the engine's Little's-law rate paces the rest."""
    trip, link_rate, window, engine = curve
    return trip + min(offset, window) * 8.0 / link_rate + max(0, offset - window) * 8.0 / engine


def _read_arrival_ns(curve: tuple, offset: float) -> float:
    """When the first ``offset`` bytes of a read are in, from its start: behind their
    completions (``_read_stream_ns``) and never before the engine, at its bandwidth, has
    moved them; at the read's end this is busy + first-byte of ``read_ns``."""
    return max(_read_stream_ns(curve, offset), offset * 8.0 / curve[3])


def read_arrivals_ns(route: topo.Route, target: topo.Node, size_bytes: int, params: Params,
                     offsets) -> list[float]:
    """For each of ``offsets``, when the first that many bytes of one read of ``size_bytes``
    are in at the requester, from the read's start (zero load). A packet the NIC sends from
    a read is ready once its last byte is: the first packets of a read are not ready a
    share of the engine's busy time into it but a round trip into it."""
    if size_bytes <= 0:
        return [0.0 for _ in offsets]
    curve = _read_curve(route, target, size_bytes, params)
    return _read_arrivals_of(curve, offsets)


def _read_arrivals_of(curve: tuple, offsets) -> list[float]:
    """``_read_arrival_ns`` of each of ``offsets``, as whole arrays: the same operations in
    the same order on each element (IEEE doubles), so the same floats, one per packet of a
    message without a Python call per packet."""
    offsets = list(offsets)
    if (not offsets or not all(type(offset) is int and 0 <= offset < 1 << 53 for offset in offsets)
            or not isinstance(curve[2], int) or curve[2] >= 1 << 53):
        return [_read_arrival_ns(curve, offset) for offset in offsets]
    trip, link_rate, window, engine = curve
    at = np.array(offsets, dtype=np.int64)
    stream = trip + np.minimum(at, window) * 8.0 / link_rate + np.maximum(0, at - window) * 8.0 / engine
    return np.maximum(stream, at * 8.0 / engine).tolist()


def path_timing(path: str, topology: topo.Topology, size_bytes: int, params: Params) -> PathTiming:
    """Steps, transfers and credit cost of one message of ``size_bytes`` on ``path``.

    The last two answers are kept (all four arguments are frozen, the timing too): latency,
    throughput and PCIe bytes each ask for the same message's timing in turn, and a 1 GiB
    message's takes about a second (its per-packet tuples); ``model compare`` and ``model
    path`` computed it two and four times per message."""
    check_choice("path", path, PATHS)
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ParamError("size_bytes", size_bytes, "an integer >= 0")
    if size_bytes > MAX_MESSAGE_BYTES:
        # past it a message's TLP and packet lists alone take minutes and gigabytes; 2**70
        # was refused as "start_address=0" with a negative range
        raise ParamError("size_bytes", size_bytes,
                         f"an integer from 0 to {MAX_MESSAGE_BYTES:,} (gpuwrite.MAX_MESSAGE_BYTES)")
    return _path_timing(path, topology, size_bytes, params)


@functools.lru_cache(maxsize=2)     # two: a 1 GiB message's timing holds tens of MB
def _path_timing(path: str, topology: topo.Topology, size_bytes: int, params: Params) -> PathTiming:
    gpu_name, nic_name = params.endpoints(topology)
    to_nic = topology.route(gpu_name, nic_name)
    gpu = topology.node(gpu_name)
    issue = params.gpu.write_issue_ns
    processing = params.nic.processing_ns
    wqe = nicmod.WQE_BASIC_BLOCK_BYTES
    cqe = Transfer("CQE", nic_name, gpu_name, "write", nicmod.CQE_BYTES)
    arrivals = None     # push paths: a packet is in once its share of the ingress is
    if path == "gpu_push":
        pushed = size_bytes + nicmod.STAGE_HEADER_BYTES
        steps = [
            Step("GPU issues the payload stores", issue, "pre"),
            Step("slot header + payload cross PCIe (posted writes)",
                 _ser_ns(to_nic, "write", pushed, params.gpu.store_rate_gbps), "ingress"),
            Step("payload propagates GPU -> NIC", to_nic.one_way_latency_ns, "post"),
        ]
        transfers = [Transfer("slot header + payload", gpu_name, nic_name, "write", pushed)]
        if params.nic.push_wqe_delivery == "blueflame":
            steps.append(Step("WQE written with the doorbell (BlueFlame) follows the payload",
                              _posted_after_ns(to_nic, wqe), "post"))
            transfers.append(Transfer("WQE + doorbell", gpu_name, nic_name, "write", wqe))
        else:
            steps.append(Step("doorbell write follows the payload", _doorbell_ns(to_nic), "post"))
            steps.append(Step("NIC fetches the WQE from GPU memory",
                              _read_round_trip_ns(to_nic, gpu) + _ser_ns(to_nic, "read", wqe), "post"))
            transfers += [Transfer("doorbell", gpu_name, nic_name, "write", nicmod.DOORBELL_BYTES),
                          Transfer("WQE fetch", nic_name, gpu_name, "read", wqe)]
        steps.append(Step("NIC processes the WQE", processing, "post"))
        transfers.append(cqe)
    elif path == "gpu_push_inline":
        if size_bytes > params.nic.inline_max_bytes:
            raise ParamError("size_bytes", size_bytes,
                             f"at most nic.inline_max_bytes ({params.nic.inline_max_bytes}) on gpu_push_inline")
        wqe_bytes = nicmod.inline_wqe_bytes(size_bytes)
        steps = [
            Step("GPU issues the WQE stores (BlueFlame)", issue, "pre"),
            Step(f"inline WQE of {wqe_bytes} B crosses PCIe",
                 _ser_ns(to_nic, "write", wqe_bytes, params.gpu.store_rate_gbps), "ingress"),
            Step("WQE propagates GPU -> NIC", to_nic.one_way_latency_ns, "post"),
            Step("NIC processes the WQE", processing, "post"),
        ]
        transfers = [Transfer("inline WQE", gpu_name, nic_name, "write", wqe_bytes), cqe]
    elif path == "nic_pull":
        read_trip = _read_round_trip_ns(to_nic, gpu)
        busy, first_byte = read_ns(to_nic, gpu, size_bytes, params)
        steps = [
            Step("GPU issues the doorbell store", issue, "pre"),
            Step("doorbell propagates GPU -> NIC", to_nic.one_way_latency_ns + _doorbell_ns(to_nic), "pre"),
            Step("NIC processes the doorbell", processing, "pre"),
            Step("NIC fetches the WQE from GPU memory", read_trip + _ser_ns(to_nic, "read", wqe), "pre"),
            Step("payload read: the read engine's time at its bandwidth", busy, "ingress"),
            Step("payload read round trip (first requests)", first_byte, "post"),
        ]
        transfers = [Transfer("doorbell", gpu_name, nic_name, "write", nicmod.DOORBELL_BYTES),
                     Transfer("WQE fetch", nic_name, gpu_name, "read", wqe),
                     Transfer("payload", nic_name, gpu_name, "read", size_bytes), cqe]
        arrivals = read_arrivals_ns(to_nic, gpu, size_bytes, params,
                                    _packet_ends(params.network, size_bytes))
    else:  # host_staged
        steps, transfers, arrivals = _host_staged(topology, gpu_name, nic_name, size_bytes, params)
        transfers.append(cqe)
    return _with_network(path, size_bytes, steps, transfers, params, to_nic, topology, gpu_name, nic_name,
                         arrivals)


def _packet_ends(network: nicmod.NetworkParams, size_bytes: int) -> list[int]:
    """Where each packet of a message ends, in bytes from the message's start."""
    return list(accumulate(nicmod.packet_payloads(network, size_bytes)))


def staging_return_ns(route_nic_to_gpu: topo.Route, params: Params) -> float:
    """Staging credits reach the GPU: the NIC's posted write of its consumer index crosses
    PCIe, and the GPU sees it at its next poll (one poll interval, the worst case)."""
    return (route_nic_to_gpu.one_way_latency_ns + _posted_after_ns(route_nic_to_gpu, nicmod.DOORBELL_BYTES)
            + params.gpu.poll_interval_ns)


def stores_whole(path: str, params: Params) -> bool:
    """Whether the NIC holds a ``path`` message whole before it sends a packet of it: a
    gpu_push message where ``nic.push_forwarding`` is ``after_doorbell``."""
    return path == "gpu_push" and params.nic.push_forwarding == "after_doorbell"


def _with_network(path, size_bytes, steps, transfers, params, to_nic, topology, gpu_name, nic_name,
                  arrivals=None) -> PathTiming:
    """Cut the message into packets and add the network steps (cut-through at the NIC).

    ``arrivals`` (read paths): when each packet's last byte is in at the NIC at zero load,
    from the start of the ingress stage; each packet's share of the ingress is then what
    makes it ready then (its bytes come a read round trip after their requests, not a
    share of the read engine's busy time into the read)."""
    network = params.network
    payloads = nicmod.packet_payloads(network, size_bytes)
    ingress = sum_in_order(step.latency_ns for step in steps if step.stage == "ingress")
    post = sum_in_order(step.latency_ns for step in steps if step.stage == "post")
    if path == "gpu_push_inline":
        staged = [nicmod.inline_wqe_bytes(size_bytes)]
    else:
        staged = [payload + nicmod.STAGE_HEADER_BYTES for payload in payloads]
    if path == "gpu_push":
        # the message's one slot header crosses PCIe in front of the first packet's payload
        shares = [payloads[0] + nicmod.STAGE_HEADER_BYTES] + payloads[1:]
    else:
        shares = staged if path == "gpu_push_inline" else payloads
    total_share = sum(shares)
    # a message's packets have at most three distinct sizes: each value is worked out once
    share_of = {share: ingress * share / total_share if total_share else ingress / len(shares)
                for share in set(shares)}
    ingress_p = [share_of[share] for share in shares]
    if arrivals is not None:
        ingress_p = _shares_arriving(arrivals, ingress, post)
    stored = stores_whole(path, params)
    if stored:
        # The NIC learns of the message from its doorbell, behind the whole payload: no
        # packet is ready before every byte is in. As one ingress of the whole message,
        # the fast simulator and the SimPy reference take the same schedule from it.
        if sum(staged) > params.nic.staging_buffer_bytes:
            raise ParamError("nic.staging_buffer_bytes", params.nic.staging_buffer_bytes,
                             f"at least the {sum(staged)} B of a {size_bytes} B message with its slot "
                             "headers: nic.push_forwarding = after_doorbell holds a whole message before "
                             "its doorbell")
        ingress_p = [ingress] + [0.0] * (len(shares) - 1)
    distinct = set(payloads)
    wire_of = {payload: (payload + network.header_bytes) * 8.0 / network.rate_gbps for payload in distinct}
    drain_of = {payload: (payload + network.header_bytes) * 8.0 / params.receiver.drain_rate_gbps
                for payload in distinct}
    credits_of = {payload: nicmod.packet_credits(network, payload) for payload in distinct}
    wire_p = [wire_of[payload] for payload in payloads]
    drain_p = [drain_of[payload] for payload in payloads]
    credits_p = [credits_of[payload] for payload in payloads]
    if max(credits_p) > network.credits_total:
        raise ParamError("network.vl_buffer_bytes", network.vl_buffer_bytes,
                         f"at least one packet ({max(credits_p)} credits of {network.credit_block_bytes} B)")
    credit_return = network.credit_update_delay_ns + network.propagation_ns
    last_tx_end = cut_through_ns(ingress_p, post, wire_p, drain_p, credits_p, network.credits_total,
                                 network.propagation_ns, credit_return)
    from_nic = topology.route(nic_name, gpu_name)
    if stored:
        overlap = "after the doorbell (nic.push_forwarding = after_doorbell: the message is stored whole, then sent)"
    elif path == "gpu_push":
        overlap = ("as their bytes arrive, before the doorbell (nic.push_forwarding = on_arrival; the part "
                   "not overlapped with PCIe)")
    else:
        overlap = "(the part not overlapped with PCIe: cut-through)"
    steps = list(steps) + [
        Step(f"NIC serialises {len(payloads)} packet(s) onto the network {overlap}",
             last_tx_end - ingress - post, "wire"),
        Step("propagation to the remote NIC", network.propagation_ns, "flight"),
        Step("acknowledgement propagates back", network.propagation_ns, "tail"),
        Step("NIC writes the CQE into GPU memory", from_nic.one_way_latency_ns
             + _ser_ns(from_nic, "write", nicmod.CQE_BYTES), "tail"),
    ]
    return PathTiming(path, size_bytes, tuple(steps), tuple(transfers), sum_in_order(drain_p),
                      sum(credits_p),
                      tuple(payloads), tuple(ingress_p), tuple(wire_p), tuple(drain_p), tuple(credits_p),
                      tuple(staged), staging_return_ns(from_nic, params), credit_return)


def _shares_arriving(arrivals, ingress: float, post: float) -> list[float]:
    """Each packet's share of the ingress stage such that packet k is ready (its shares so
    far, then ``post``) at ``arrivals[k]``: the last one at ingress + post, none before the
    one ahead of it or before ``post``."""
    # Packet k is through min(ingress, max(0, arrival_j - post for j <= k)) of the ingress
    # (min and max round nothing): a running maximum, then the differences.
    if len(arrivals) < 2:
        return [ingress - 0.0]
    through = np.minimum(ingress, np.maximum.accumulate(np.maximum(0.0, np.asarray(arrivals[:-1], dtype=float) - post)))
    shares = np.diff(through, prepend=0.0).tolist()
    shares.append(ingress - float(through[-1]))
    return shares


def cut_through_ns(ingress_ns, post_ns, wire_ns, drain_ns, credits, credits_total, propagation_ns,
                   credit_return_ns) -> float:
    """Zero-load time from the first packet's ingress to the last packet leaving the NIC.

    A two-stage flow shop per packet (PCIe ingress, then the network link) with the
    credit loop: packet k is sent once it is in, the link is free, and enough credits
    came back (each packet's credits return ``credit_return_ns`` after the receiver
    drained it). The loop runs compiled (``_cut_through_ns``): a 2 GiB message is half a
    million packets.
    """
    need = np.asarray(credits, dtype=np.int64)
    if len(need) and int(need.max()) > credits_total:
        # the compiled loop would wait for credits no packet holds (the plain loop it
        # replaced ran off its list: an IndexError)
        raise ParamError("credits_total", credits_total,
                         f"at least the {int(need.max())} credits of the largest packet")
    return float(_cut_through_ns(np.asarray(ingress_ns, dtype=np.float64), float(post_ns),
                                 np.asarray(wire_ns, dtype=np.float64),
                                 np.asarray(drain_ns, dtype=np.float64), need,
                                 int(credits_total), float(propagation_ns),
                                 float(credit_return_ns)))


@njit(cache=True)
def _cut_through_ns(ingress_ns, post_ns, wire_ns, drain_ns, credits, credits_total, propagation_ns,
                    credit_return_ns):
    """cut_through_ns's loop: the same operations in the same order as the Python loop it
    replaced (no fast-math), so the same doubles come out. Every packet needs at most
    ``credits_total`` credits (the caller checks), so the wait for returns ends before the
    packets sent so far run out."""
    n = len(ingress_ns)
    return_at = np.empty(n, dtype=np.float64)    # when each packet's credits are back
    ready = link_free = drain_free = 0.0
    in_use = 0
    head = 0
    for k in range(n):
        ready += ingress_ns[k]
        start = ready + post_ns
        if link_free > start:
            start = link_free
        while head < k and return_at[head] <= start:
            in_use -= credits[head]
            head += 1
        while credits_total - in_use < credits[k]:
            if return_at[head] > start:
                start = return_at[head]
            in_use -= credits[head]
            head += 1
        in_use += credits[k]
        link_free = start + wire_ns[k]
        drained = link_free + propagation_ns
        if drain_free > drained:
            drained = drain_free
        drain_free = drained + drain_ns[k]
        return_at[k] = drain_free + credit_return_ns
    return link_free


def _host_staged(topology, gpu_name, nic_name, size_bytes, params):
    """GPU copies chunks into a host bounce buffer; the NIC reads each chunk: a 2-stage pipeline."""
    memory_name = topology.host_memory_near(nic_name)
    memory = topology.node(memory_name)
    gpu_to_memory = topology.route(gpu_name, memory_name)
    nic_to_memory = topology.route(nic_name, memory_name)
    to_nic = topology.route(gpu_name, nic_name)
    chunk = params.nic.bounce_chunk_bytes
    chunks = [chunk] * (size_bytes // chunk) + ([size_bytes % chunk] if size_bytes % chunk else [])
    chunks = chunks or [0]
    copy_fixed = params.gpu.write_issue_ns + gpu_to_memory.one_way_latency_ns
    read_trip = _read_round_trip_ns(nic_to_memory, memory)
    wqe_fetch = read_trip + _ser_ns(nic_to_memory, "read", nicmod.WQE_BASIC_BLOCK_BYTES)
    # After a chunk lands in host memory the GPU rings the doorbell for it; the NIC
    # fetches the WQE, then reads the chunk.
    handoff = to_nic.one_way_latency_ns + _doorbell_ns(to_nic) + params.nic.processing_ns + wqe_fetch
    # every chunk but the last has the same size: work out each distinct size once
    copy_of = {c: _ser_ns(gpu_to_memory, "write", c, params.gpu.copy_rate_gbps) for c in set(chunks)}
    read_of = {c: read_ns(nic_to_memory, memory, c, params) for c in set(chunks)}
    copy_ser = [copy_of[c] for c in chunks]
    read_ser = [read_of[c][0] for c in chunks]
    read_first = [read_of[c][1] for c in chunks]
    # two-stage flow shop: the copy of chunk k, then (after the handoff) its read; the
    # message is in once every chunk's last bytes are (a short last chunk's round trip can
    # end before a long one's before it)
    copy_done, read_busy_done, read_done = copy_fixed, 0.0, 0.0
    read_starts = []
    for copy_ns, busy_ns, first_ns in zip(copy_ser, read_ser, read_first):
        copy_done += copy_ns
        read_starts.append(max(copy_done + handoff, read_busy_done))
        read_busy_done = read_starts[-1] + busy_ns
        read_done = max(read_done, read_busy_done + first_ns)
    copy_busy, read_busy = sum_in_order(copy_ser), sum_in_order(read_ser)
    busiest = max(copy_busy, read_busy)
    steps = [
        Step(f"GPU issues the copy of {len(chunks)} chunk(s) into host memory", params.gpu.write_issue_ns, "pre"),
        Step(f"copy + read pipeline, busiest stage ({'copy' if copy_busy >= read_busy else 'read'})",
             busiest, "ingress"),
        Step("pipeline fill: propagation, doorbells, WQE fetch, host read round trip",
             read_done - params.gpu.write_issue_ns - busiest, "post"),
    ]
    n = len(chunks)
    transfers = [Transfer("payload copy", gpu_name, memory_name, "write", size_bytes),
                 Transfer("doorbell", gpu_name, nic_name, "write", nicmod.DOORBELL_BYTES, n),
                 Transfer("WQE fetch", nic_name, memory_name, "read", nicmod.WQE_BASIC_BLOCK_BYTES, n),
                 Transfer("payload read", nic_name, memory_name, "read", size_bytes)]
    arrivals = _staged_arrivals(nic_to_memory, memory, chunks, read_starts, params)
    return steps, transfers, [arrival - params.gpu.write_issue_ns for arrival in arrivals]


def _staged_arrivals(route, memory, chunks, read_starts, params) -> list[float]:
    """host_staged: when each packet's last byte is in at the NIC (from the message's issue):
    every chunk it spans must have been read up to there; chunk c's read starts at
    ``read_starts[c]`` and its bytes follow ``read_arrivals_ns``."""
    curves = {size: _read_curve(route, memory, size, params) for size in set(chunks) if size > 0}
    # chunks share sizes and packets share offsets into them: each arrival once
    end_of = {size: _read_arrival_ns(curves[size], size) if size > 0 else 0.0 for size in set(chunks)}
    arrival_of: dict[tuple[int, int], float] = {}
    arrivals, ready = [], 0.0
    c, chunk_start, last = 0, 0, len(chunks) - 1
    for end in _packet_ends(params.network, sum(chunks)):
        while c < last and chunk_start + chunks[c] < end:
            done = read_starts[c] + end_of[chunks[c]]
            if done > ready:
                ready = done
            chunk_start += chunks[c]
            c += 1
        offset = end - chunk_start
        into = arrival_of.get((chunks[c], offset))
        if into is None:
            into = _read_arrival_ns(curves[chunks[c]], offset) if offset > 0 else 0.0
            arrival_of[(chunks[c], offset)] = into
        done = read_starts[c] + into
        if done > ready:
            ready = done
        arrivals.append(ready)
    return arrivals


# --- the API the CLI, doctor and experiments use -------------------------------------

def _topology(topology: topo.Topology | str | None, params: Params) -> topo.Topology:
    if topology is None:
        return params.build_topology()
    if isinstance(topology, str):
        return dataclasses.replace(params, topology=topology).build_topology()
    return topology


def steps(path: str, topology, size_bytes: int, params: Params | None = None) -> list[Step]:
    """The steps of one message at zero load, in order."""
    params = params or Params()
    return list(path_timing(path, _topology(topology, params), size_bytes, params).steps)


def latency_ns(path: str, topology, size_bytes: int, params: Params | None = None) -> float:
    """Zero-load latency from the GPU issuing a message to its CQE landing in GPU memory."""
    params = params or Params()
    return path_timing(path, _topology(topology, params), size_bytes, params).latency_ns


def resource_times_ns(timing: PathTiming, params: Params) -> dict[str, float]:
    """Time each shared resource is busy per message when messages are back to back.

    Credits and staging space are loops (Little's law): a packet holds ``c`` of ``C``
    credits for its credit loop (serialisation, flight, drain, the credit update and its
    flight back), so at most C // c such packets are in the loop at once; likewise a
    pushed packet holds its staging space from reservation until the GPU sees it freed.
    """
    network = params.network
    # Per packet, as arrays (a 2 GiB message is half a million packets); every expression
    # keeps the order of the loop it replaced and the sums run in packet order
    # (sum_in_order), so the same doubles come out.
    wire = np.asarray(timing.packet_wire_ns, dtype=np.float64)
    need = np.asarray(timing.packet_credits, dtype=np.int64)
    holds = need != 0       # a packet of no bytes at all (network.header_bytes = 0) holds no credits
    drain = np.asarray(timing.packet_drain_ns, dtype=np.float64)[holds]
    loop = wire[holds] + network.propagation_ns + drain + timing.credit_return_ns
    credit_time = sum_in_order(loop / np.maximum(1, network.credits_total // need[holds]))
    out = {
        "pcie": timing.stage_ns("ingress"),
        "network": timing.wire_busy_ns,
        "receiver": timing.drain_ns / params.receiver.duty_cycle,
        "credits": credit_time,
    }
    if timing.path.startswith("gpu_push") and params.nic.policy == "hold":
        pre, post = timing.stage_ns("pre"), timing.stage_ns("post")
        stored, whole = stores_whole(timing.path, params), timing.stage_ns("ingress")
        if stored:
            # Every packet is held from before the whole payload's ingress until it leaves
            # behind the packets before it.
            loop = pre + whole + post + np.cumsum(wire) + timing.staging_return_ns
        else:
            loop = pre + np.asarray(timing.packet_ingress_ns, dtype=np.float64) + post + wire \
                + timing.staging_return_ns
        staged = np.asarray(timing.packet_staging_bytes, dtype=np.float64)
        out["staging"] = sum_in_order(loop * staged / params.nic.staging_buffer_bytes)
    return out


def bottleneck(path: str, topology, size_bytes: int, params: Params | None = None) -> tuple[str, float]:
    """The resource that limits saturated throughput, and its busy time per message (ns)."""
    params = params or Params()
    timing = path_timing(path, _topology(topology, params), size_bytes, params)
    times = resource_times_ns(timing, params)
    name = max(times, key=times.get)
    return name, times[name]


def throughput_gbps(path: str, topology, size_bytes: int, params: Params | None = None) -> float:
    """Saturated payload throughput with enough messages in flight: size / busiest resource."""
    _, busy_ns = bottleneck(path, topology, size_bytes, params)
    return size_bytes * 8.0 / busy_ns if busy_ns > 0 else 0.0


def pcie_bytes(path: str, topology, size_bytes: int, params: Params | None = None) -> dict[str, int]:
    """Wire bytes per message on the GPU's and the NIC's own PCIe links, per direction."""
    params = params or Params()
    topology = _topology(topology, params)
    gpu_name, nic_name = params.endpoints(topology)
    timing = path_timing(path, topology, size_bytes, params)
    out = {"gpu_out": 0, "gpu_in": 0, "nic_in": 0, "nic_out": 0}
    for transfer in timing.transfers:
        link = topology.route(transfer.requester, transfer.target).pcie_links()[0].pcie
        wire = pcie.wire_bytes(link, transfer.operation, transfer.size_bytes)
        if transfer.operation == "write":
            moves = [(transfer.requester, transfer.target, wire.data_direction_bytes)]
        else:
            moves = [(transfer.target, transfer.requester, wire.data_direction_bytes),
                     (transfer.requester, transfer.target, wire.other_direction_bytes)]
        for source, destination, count in moves:
            count *= transfer.count
            if source == gpu_name:
                out["gpu_out"] += count
            if destination == gpu_name:
                out["gpu_in"] += count
            if source == nic_name:
                out["nic_out"] += count
            if destination == nic_name:
                out["nic_in"] += count
    return out


def rank_paths(topology, size_bytes: int, params: Params | None = None,
               gpu: str | None = None, nic: str | None = None) -> list[dict]:
    """Every path that can carry ``size_bytes`` between ``gpu`` and ``nic``, fastest first.

    Each entry: path, zero-load latency_ns, saturated throughput_gbps, bottleneck. This is
    what ``doctor`` reports as "the data path to expect to win here".
    """
    params = params or Params()
    overrides = {key: value for key, value in (("gpu_name", gpu), ("nic_name", nic)) if value}
    params = params.updated(overrides) if overrides else params
    topology = _topology(topology, params)
    ranked = []
    for path in PATHS:
        if path == "gpu_push_inline" and size_bytes > params.nic.inline_max_bytes:
            continue
        name, busy_ns = bottleneck(path, topology, size_bytes, params)
        ranked.append({"path": path, "latency_ns": latency_ns(path, topology, size_bytes, params),
                       "throughput_gbps": size_bytes * 8.0 / busy_ns if busy_ns > 0 else 0.0,
                       "bottleneck": name})
    return sorted(ranked, key=lambda entry: entry["latency_ns"])
