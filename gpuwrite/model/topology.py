"""PCIe topologies: root complexes, switches, endpoints (GPU, NIC, host memory), sockets.

A ``Topology`` is a tree of PCIe links per socket plus a socket interconnect between the
root complexes. ``Topology.route(a, b)`` gives the hops between two endpoints, the
latency of each, and the narrowest link for an operation. Four presets cover the classes
a paper compares (``PATH_CLASSES``); ``classify`` puts any route into one of them, as
``nvidia-smi topo -m`` does (PIX, PXB, PHB/NODE, SYS).

Latencies are one-way, in ns. A node's ``latency_ns`` is the time to traverse it (switch,
root complex) or, for an endpoint, the time it takes to answer a read of its memory.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from gpuwrite.model import pcie
from gpuwrite.model.errors import ParamError, check_choice, check_positive

NODE_KINDS = ("root_complex", "switch", "gpu", "nic", "host_memory")
ENDPOINT_KINDS = ("gpu", "nic", "host_memory")
LINK_KINDS = ("pcie", "socket", "memory")
PATH_CLASSES = ("same_switch", "across_switches", "across_root_ports", "across_sockets")

# --- default latencies and rates, each with its source --------------------------------
# Assumption (vendor class of Gen5 switches, e.g. Broadcom PEX89000 datasheets quote
# ~100-150 ns port to port); re-measure with `gpuwrite calibrate`.
SWITCH_LATENCY_NS = 150.0
# Per-link PHY + data-link latency; assumption of the same order as pcie-bench's
# observations (tens of ns per link).
PCIE_LINK_LATENCY_NS = 20.0
# Root complex traversal and DRAM access: chosen together with GPU_READ_ISSUE_NS so that
# the same_switch preset reproduces the 1.14 us GPU read of host memory measured in
# ../shared/calibration/h200-pcie5-2026-11.md (see tests/model/test_topology.py).
ROOT_COMPLEX_LATENCY_NS = 200.0
HOST_MEMORY_LATENCY_NS = 100.0
# Time from a GPU load leaving the SM to the request entering the PCIe link and back again.
GPU_READ_ISSUE_NS = 260.0
# A read of GPU memory answered by the GPU: calibration, "one GPU dependent ld.acquire.sys
# of its own memory 0.15 us" (assumed the same for a peer reading the GPU's BAR).
GPU_MEMORY_LATENCY_NS = 150.0
# Socket interconnect (UPI/xGMI class): assumptions, one-way latency and payload rate.
SOCKET_LINK_LATENCY_NS = 150.0
SOCKET_LINK_RATE_GBPS = 480.0
# Memory controller to root complex: a non-limiting link (assumption: 8 DDR5 channels).
HOST_MEMORY_RATE_GBPS = 2400.0
# Peer-to-peer reads through a root complex are throttled by many platforms; assumption,
# to be replaced by a calibration (pcie-bench and NVIDIA's GPUDirect notes both report
# P2P reads across the root complex far below link rate).
P2P_READ_CAP_GBPS = 100.0
P2P_READ_CAP_CROSS_SOCKET_GBPS = 40.0


@dataclass(frozen=True)
class Node:
    """A point in the tree: a root complex (one per socket), a switch, or an endpoint."""

    name: str
    kind: str
    latency_ns: float = 0.0
    socket: int = 0

    def __post_init__(self):
        if not self.name:
            raise ParamError("node.name", self.name, "a non-empty string")
        check_choice(f"node {self.name} kind", self.kind, NODE_KINDS)
        check_positive(f"node {self.name} latency_ns", self.latency_ns, zero_ok=True)


@dataclass(frozen=True)
class Link:
    """A link between two nodes: a PCIe link, the socket interconnect, or memory."""

    a: str
    b: str
    kind: str = "pcie"
    pcie: pcie.LinkConfig | None = None
    latency_ns: float = PCIE_LINK_LATENCY_NS
    rate_gbps: float | None = None  # payload rate for non-PCIe links

    def __post_init__(self):
        check_choice(f"link {self.a}-{self.b} kind", self.kind, LINK_KINDS)
        if self.kind == "pcie" and self.pcie is None:
            object.__setattr__(self, "pcie", pcie.LinkConfig())
        if self.kind != "pcie":
            if self.rate_gbps is None:
                raise ParamError(f"link {self.a}-{self.b} rate_gbps", None, "a number > 0 for a non-PCIe link")
            check_positive(f"link {self.a}-{self.b} rate_gbps", self.rate_gbps)
        check_positive(f"link {self.a}-{self.b} latency_ns", self.latency_ns, zero_ok=True)

    def effective_rate_gbps(self, operation: str, size_bytes: int) -> float:
        """Payload rate of back-to-back operations of this size over this link."""
        if self.kind == "pcie":
            return pcie.effective_rate_gbps(self.pcie, operation, size_bytes)
        return float(self.rate_gbps)

    def label(self) -> str:
        if self.kind == "pcie":
            return f"{self.a}-{self.b} (Gen{self.pcie.generation} x{self.pcie.width})"
        return f"{self.a}-{self.b} ({self.kind}, {self.rate_gbps:g} Gb/s)"


@dataclass(frozen=True)
class Route:
    """The way between two endpoints: nodes in order, links in order, and what it crosses."""

    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    p2p_read_cap_gbps: float | None

    @property
    def hop_latencies_ns(self) -> list[tuple[str, float]]:
        """One-way latency of each link and each node traversed between the endpoints."""
        hops = []
        for index, link in enumerate(self.links):
            hops.append((f"link {link.a}-{link.b}", link.latency_ns))
            if index + 1 < len(self.links):
                node = self.nodes[index + 1]
                hops.append((f"{node.kind} {node.name}", node.latency_ns))
        return hops

    @property
    def one_way_latency_ns(self) -> float:
        """Sum of the hop latencies (endpoints excluded)."""
        return sum(latency for _, latency in self.hop_latencies_ns)

    @property
    def crosses_root_complex(self) -> bool:
        return any(node.kind == "root_complex" for node in self.nodes[1:-1])

    @property
    def crosses_socket(self) -> bool:
        return any(link.kind == "socket" for link in self.links)

    @property
    def is_peer_to_peer(self) -> bool:
        return self.nodes[0].kind != "host_memory" and self.nodes[-1].kind != "host_memory"

    @property
    def path_class(self) -> str:
        """One of PATH_CLASSES."""
        if self.crosses_socket:
            return "across_sockets"
        if self.crosses_root_complex:
            return "across_root_ports"
        switches = sum(1 for node in self.nodes[1:-1] if node.kind == "switch")
        return "same_switch" if switches <= 1 else "across_switches"

    def narrowest(self, operation: str, size_bytes: int) -> tuple[Link | None, float]:
        """The link with the lowest payload rate for this operation, and that rate.

        A peer-to-peer read that crosses a root complex is also held to the platform's
        P2P read cap; the link returned is then None.
        """
        best_link, best_rate = None, float("inf")
        for link in self.links:
            rate = link.effective_rate_gbps(operation, size_bytes)
            if rate < best_rate:
                best_link, best_rate = link, rate
        if operation == "read" and self.is_peer_to_peer and self.p2p_read_cap_gbps is not None:
            if self.p2p_read_cap_gbps < best_rate:
                return None, float(self.p2p_read_cap_gbps)
        return best_link, best_rate

    def pcie_links(self) -> list[Link]:
        return [link for link in self.links if link.kind == "pcie"]


@dataclass(frozen=True)
class Topology:
    """A PCIe tree per socket, joined by socket links; endpoints are GPUs, NICs, memory."""

    name: str
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    p2p_read_cap_gbps: float = P2P_READ_CAP_GBPS
    p2p_read_cap_cross_socket_gbps: float = P2P_READ_CAP_CROSS_SOCKET_GBPS
    _adjacency: dict = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            raise ParamError("topology node names", duplicates, "unique names")
        adjacency = {name: [] for name in names}
        for link in self.links:
            for end in (link.a, link.b):
                if end not in adjacency:
                    raise ParamError(f"link {link.a}-{link.b} endpoint", end, ", ".join(names))
            adjacency[link.a].append((link.b, link))
            adjacency[link.b].append((link.a, link))
        check_positive("p2p_read_cap_gbps", self.p2p_read_cap_gbps)
        check_positive("p2p_read_cap_cross_socket_gbps", self.p2p_read_cap_cross_socket_gbps)
        object.__setattr__(self, "_adjacency", adjacency)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise ParamError("endpoint", name, ", ".join(n.name for n in self.nodes))

    def endpoints(self, kind: str) -> list[Node]:
        check_choice("endpoint kind", kind, ENDPOINT_KINDS)
        return [node for node in self.nodes if node.kind == kind]

    def first(self, kind: str) -> str:
        """Name of the first endpoint of a kind (a preset's ``gpu0``, ``nic0``)."""
        found = self.endpoints(kind)
        if not found:
            raise ParamError(f"{kind} endpoint in topology {self.name}", None, "a topology with one")
        return found[0].name

    def host_memory_near(self, endpoint: str) -> str:
        """The host memory on the same socket as ``endpoint`` (else the first one)."""
        socket = self.node(endpoint).socket
        memories = self.endpoints("host_memory")
        if not memories:
            raise ParamError(f"host_memory endpoint in topology {self.name}", None, "a topology with one")
        for memory in memories:
            if memory.socket == socket:
                return memory.name
        return memories[0].name

    def route(self, source: str, destination: str) -> Route:
        """The unique (shortest) route between two endpoints of the tree."""
        self.node(source), self.node(destination)
        previous = {source: None}
        queue = deque([source])
        while queue:
            here = queue.popleft()
            if here == destination:
                break
            for neighbour, link in self._adjacency[here]:
                if neighbour not in previous:
                    previous[neighbour] = (here, link)
                    queue.append(neighbour)
        if destination not in previous:
            raise ParamError("route", f"{source}->{destination}", "endpoints connected in the topology")
        names, links = [destination], []
        while previous[names[-1]] is not None:
            here, link = previous[names[-1]]
            links.append(link)
            names.append(here)
        names.reverse()
        links.reverse()
        nodes = tuple(self.node(name) for name in names)
        cap = None
        if any(link.kind == "socket" for link in links):
            cap = self.p2p_read_cap_cross_socket_gbps
        elif any(node.kind == "root_complex" for node in nodes[1:-1]):
            cap = self.p2p_read_cap_gbps
        return Route(nodes, tuple(links), cap)

    def with_links(self, link_config: pcie.LinkConfig) -> "Topology":
        """The same tree with every PCIe link set to ``link_config``."""
        links = tuple(replace(link, pcie=link_config) if link.kind == "pcie" else link for link in self.links)
        return replace(self, links=links, _adjacency=None)


def classify(topology: Topology, a: str, b: str) -> str:
    """Class of the route between two endpoints: one of PATH_CLASSES."""
    return topology.route(a, b).path_class


# --- presets -------------------------------------------------------------------------

def _socket(index: int) -> list[Node]:
    return [
        Node(f"rc{index}", "root_complex", ROOT_COMPLEX_LATENCY_NS, index),
        Node(f"mem{index}", "host_memory", HOST_MEMORY_LATENCY_NS, index),
    ]


def _memory_link(index: int) -> Link:
    return Link(f"rc{index}", f"mem{index}", "memory", None, 0.0, HOST_MEMORY_RATE_GBPS)


def _build(name, nodes, pcie_pairs, extra_links=(), link_config=None, **caps) -> Topology:
    config = link_config or pcie.LinkConfig()
    links = [Link(a, b, "pcie", config) for a, b in pcie_pairs]
    links += list(extra_links)
    return Topology(name, tuple(nodes), tuple(links), **caps)


def same_switch(link_config: pcie.LinkConfig | None = None, **caps) -> Topology:
    """GPU and NIC below one PCIe switch (nvidia-smi: PIX)."""
    nodes = _socket(0) + [
        Node("sw0", "switch", SWITCH_LATENCY_NS),
        Node("gpu0", "gpu", GPU_MEMORY_LATENCY_NS),
        Node("nic0", "nic", 0.0),
    ]
    pairs = [("rc0", "sw0"), ("sw0", "gpu0"), ("sw0", "nic0")]
    return _build("same_switch", nodes, pairs, [_memory_link(0)], link_config, **caps)


def across_switches(link_config: pcie.LinkConfig | None = None, **caps) -> Topology:
    """GPU and NIC below different switches joined by a switch under one root port (PXB)."""
    nodes = _socket(0) + [
        Node("sw_top", "switch", SWITCH_LATENCY_NS),
        Node("sw_gpu", "switch", SWITCH_LATENCY_NS),
        Node("sw_nic", "switch", SWITCH_LATENCY_NS),
        Node("gpu0", "gpu", GPU_MEMORY_LATENCY_NS),
        Node("nic0", "nic", 0.0),
    ]
    pairs = [("rc0", "sw_top"), ("sw_top", "sw_gpu"), ("sw_top", "sw_nic"),
             ("sw_gpu", "gpu0"), ("sw_nic", "nic0")]
    return _build("across_switches", nodes, pairs, [_memory_link(0)], link_config, **caps)


def across_root_ports(link_config: pcie.LinkConfig | None = None, **caps) -> Topology:
    """GPU and NIC below different root ports of one socket: through the root complex (PHB)."""
    nodes = _socket(0) + [
        Node("sw_gpu", "switch", SWITCH_LATENCY_NS),
        Node("sw_nic", "switch", SWITCH_LATENCY_NS),
        Node("gpu0", "gpu", GPU_MEMORY_LATENCY_NS),
        Node("nic0", "nic", 0.0),
    ]
    pairs = [("rc0", "sw_gpu"), ("rc0", "sw_nic"), ("sw_gpu", "gpu0"), ("sw_nic", "nic0")]
    return _build("across_root_ports", nodes, pairs, [_memory_link(0)], link_config, **caps)


def across_sockets(link_config: pcie.LinkConfig | None = None, **caps) -> Topology:
    """GPU on socket 0, NIC on socket 1: through both root complexes and the interconnect (SYS)."""
    nodes = _socket(0) + _socket(1) + [
        Node("sw_gpu", "switch", SWITCH_LATENCY_NS, 0),
        Node("sw_nic", "switch", SWITCH_LATENCY_NS, 1),
        Node("gpu0", "gpu", GPU_MEMORY_LATENCY_NS, 0),
        Node("nic0", "nic", 0.0, 1),
    ]
    pairs = [("rc0", "sw_gpu"), ("rc1", "sw_nic"), ("sw_gpu", "gpu0"), ("sw_nic", "nic0")]
    extra = [_memory_link(0), _memory_link(1),
             Link("rc0", "rc1", "socket", None, SOCKET_LINK_LATENCY_NS, SOCKET_LINK_RATE_GBPS)]
    return _build("across_sockets", nodes, pairs, extra, link_config, **caps)


PRESETS = {
    "same_switch": same_switch,
    "across_switches": across_switches,
    "across_root_ports": across_root_ports,
    "across_sockets": across_sockets,
}


def preset(name: str, link_config: pcie.LinkConfig | None = None, **caps) -> Topology:
    """A preset topology by name: one of ``PRESETS``."""
    check_choice("topology", name, tuple(PRESETS))
    return PRESETS[name](link_config, **caps)
