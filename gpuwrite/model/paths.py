"""The four data paths as sequences of steps, and their analytical latency and throughput.

A message's life on every path has the same shape, which the simulator reuses:

    pre      fixed delays before the payload moves (issue, doorbell, WQE fetch)
    ingress  the payload crosses PCIe into the NIC: occupies the narrowest PCIe link
    post     fixed delays after it (propagation over the tree, read round trip)
    wire     the NIC serialises the message onto the network link (after credits)
    flight   propagation to the remote NIC
    tail     the acknowledgement returns and the NIC writes the CQE into GPU memory

The NIC forwards a message once all of it is inside the NIC (store and forward per
message), on every path alike. Serialisation over the PCIe tree is counted once, at the
narrowest link (cut-through switches).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpuwrite.model import nic as nicmod
from gpuwrite.model import pcie
from gpuwrite.model import topology as topo
from gpuwrite.model.errors import ParamError, check_choice
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
    credit_loop_extra_ns: float   # time credits are held beyond wire+flight+drain+return

    def stage_ns(self, stage: str) -> float:
        return sum(step.latency_ns for step in self.steps if step.stage == stage)

    @property
    def latency_ns(self) -> float:
        return sum(step.latency_ns for step in self.steps)


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


def _network_steps(params: Params, gpu_route: topo.Route, size_bytes: int) -> list[Step]:
    network = params.network
    wire = nicmod.network_wire_bytes(network, size_bytes) * 8.0 / network.rate_gbps
    return [
        Step("NIC serialises the message onto the network", wire, "wire"),
        Step("propagation to the remote NIC", network.propagation_ns, "flight"),
        Step("acknowledgement propagates back", network.propagation_ns, "tail"),
        Step("NIC writes the CQE into GPU memory", gpu_route.one_way_latency_ns
             + _ser_ns(gpu_route, "write", nicmod.CQE_BYTES), "tail"),
    ]


def path_timing(path: str, topology: topo.Topology, size_bytes: int, params: Params) -> PathTiming:
    """Steps, transfers and credit cost of one message of ``size_bytes`` on ``path``."""
    check_choice("path", path, PATHS)
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ParamError("size_bytes", size_bytes, "an integer >= 0")
    gpu_name, nic_name = params.endpoints(topology)
    to_nic = topology.route(gpu_name, nic_name)
    gpu = topology.node(gpu_name)
    issue = params.gpu.write_issue_ns
    processing = params.nic.processing_ns
    wqe = nicmod.WQE_BASIC_BLOCK_BYTES
    cqe = Transfer("CQE", nic_name, gpu_name, "write", nicmod.CQE_BYTES)
    extra_hold = 0.0
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
        steps = [
            Step("GPU issues the doorbell store", issue, "pre"),
            Step("doorbell propagates GPU -> NIC", to_nic.one_way_latency_ns + _doorbell_ns(to_nic), "pre"),
            Step("NIC processes the doorbell", processing, "pre"),
            Step("NIC fetches the WQE from GPU memory", read_trip + _ser_ns(to_nic, "read", wqe), "pre"),
            Step("payload read completions cross PCIe", _ser_ns(to_nic, "read", size_bytes), "ingress"),
            Step("payload read round trip", read_trip, "post"),
        ]
        transfers = [Transfer("doorbell", gpu_name, nic_name, "write", nicmod.DOORBELL_BYTES),
                     Transfer("WQE fetch", nic_name, gpu_name, "read", wqe),
                     Transfer("payload", nic_name, gpu_name, "read", size_bytes), cqe]
        extra_hold = steps[4].latency_ns + steps[5].latency_ns  # credits held during the read
    else:  # host_staged
        steps, transfers, extra_hold = _host_staged(topology, gpu_name, nic_name, size_bytes, params)
        transfers.append(cqe)
    steps += _network_steps(params, to_nic, size_bytes)
    drain = nicmod.network_wire_bytes(params.network, size_bytes) * 8.0 / params.receiver.drain_rate_gbps
    return PathTiming(path, size_bytes, tuple(steps), tuple(transfers), drain,
                      nicmod.credits_needed(params.network, size_bytes), extra_hold)


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
    handoff = to_nic.one_way_latency_ns + _doorbell_ns(to_nic) + params.nic.processing_ns + wqe_fetch + read_trip
    copy_ser = [_ser_ns(gpu_to_memory, "write", c, params.gpu.copy_rate_gbps) for c in chunks]
    read_ser = [_ser_ns(nic_to_memory, "read", c) for c in chunks]
    # two-stage flow shop: the copy of chunk k, then (after the handoff) its read
    copy_done, read_done = copy_fixed, 0.0
    for copy_ns, read_ns in zip(copy_ser, read_ser):
        copy_done += copy_ns
        read_done = max(copy_done + handoff, read_done) + read_ns
    busiest = max(sum(copy_ser), sum(read_ser))
    steps = [
        Step(f"GPU issues the copy of {len(chunks)} chunk(s) into host memory", params.gpu.write_issue_ns, "pre"),
        Step(f"copy + read pipeline, busiest stage ({'copy' if sum(copy_ser) >= sum(read_ser) else 'read'})",
             busiest, "ingress"),
        Step("pipeline fill: propagation, doorbells, WQE fetch, host read round trip",
             read_done - params.gpu.write_issue_ns - busiest, "post"),
    ]
    n = len(chunks)
    transfers = [Transfer("payload copy", gpu_name, memory_name, "write", size_bytes),
                 Transfer("doorbell", gpu_name, nic_name, "write", nicmod.DOORBELL_BYTES, n),
                 Transfer("WQE fetch", nic_name, memory_name, "read", nicmod.WQE_BASIC_BLOCK_BYTES, n),
                 Transfer("payload read", nic_name, memory_name, "read", size_bytes)]
    return steps, transfers, read_done - params.gpu.write_issue_ns


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
    """Time each shared resource is busy per message when messages are back to back."""
    network = params.network
    per_credit_window = max(1, network.credits_total // max(timing.credits, 1))
    credit_loop = (timing.credit_loop_extra_ns + timing.stage_ns("wire") + 2 * network.propagation_ns
                   + timing.drain_ns + network.credit_update_delay_ns)
    return {
        "pcie": timing.stage_ns("ingress"),
        "network": timing.stage_ns("wire"),
        "receiver": timing.drain_ns / params.receiver.duty_cycle,
        "credits": credit_loop / per_credit_window,
    }


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
