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
from gpuwrite.model.ordered import sum_in_order

NODE_KINDS = ("root_complex", "switch", "gpu", "nic", "host_memory")
ENDPOINT_KINDS = ("gpu", "nic", "host_memory")
LINK_KINDS = ("pcie", "socket", "memory")
PATH_CLASSES = ("same_switch", "across_switches", "across_root_ports", "across_sockets")

# --- platform latencies and rates: every one a field of PlatformParams, with its source --
# The GPU's own read issue cost lives in nic.GpuParams; this default is shared with it.
# Time from a GPU load leaving the SM to the request entering the PCIe link and back again.
GPU_READ_ISSUE_NS = 260.0

# Cross-socket penalty, published: pcie-bench/data (Neugebauer et al., SIGCOMM 2018),
# NFP6000 on a dual Xeon E5-2630v4 (dell-t430), lat_dma_sizes.csv, LAT_DMA_RD median:
# 64 B reads of local memory (s0-s0-s0) 546.7 ns, of the other socket's memory (s0-s1-s1)
# 653.3 ns: +106.7 ns per round trip (Ivy Bridge E5-2620v2, dell-t620: 560.0 -> 666.7 ns,
# the same +106.7 ns). One way: 53.3 ns, the far root complex included.
CROSS_SOCKET_ROUND_TRIP_NS = 653.3 - 546.7

PLATFORM_SOURCES = {
    "switch_latency_ns": "assumption: Gen5 switch port to port (Broadcom PEX89000 class datasheets quote ~100-150 ns)",
    "pcie_link_latency_ns": "assumption: PHY + data link per link, tens of ns as pcie-bench observes",
    "root_complex_latency_ns": "derived: with host_memory_latency_ns and gpu.read_issue_ns reproduces the "
                               "calibration's 1.14 us GPU read of host memory (h200-pcie5-2026-11.md)",
    "host_memory_latency_ns": "derived together with root_complex_latency_ns (see there); DRAM access ~100 ns",
    "gpu_memory_latency_ns": "calibration: one GPU dependent ld.acquire.sys of its own memory 0.15 us",
    "socket_link_latency_ns": "pcie-bench/data lat_dma_sizes.csv (Neugebauer et al., SIGCOMM 2018): remote-socket "
                              "DMA reads +106.7 ns per round trip (E5-2630v4 s0-s1-s1 vs s0-s0-s0); half one way",
    "socket_link_rate_gbps": "assumption: UPI/xGMI class interconnect payload rate",
    "host_memory_rate_gbps": "assumption: 8 DDR5 channels, never the bottleneck here",
    "p2p_read_cap_gbps": "optional platform limit on P2P reads through a root complex; 0 = off (default). "
                         "Set it from a measurement; figures sweep it",
    "p2p_read_cap_cross_socket_gbps": "optional limit on P2P reads across sockets; 0 = off (default)",
}


@dataclass(frozen=True)
class PlatformParams:
    """Latencies and rates of the PCIe tree, the root complexes, the sockets and memory.

    One-way latencies in ns; node latencies are traversal times, or for an endpoint the
    time it takes to answer a read of its memory. ``PLATFORM_SOURCES`` names the source
    of every default. A P2P read cap of 0 means the platform does not throttle P2P reads.
    """

    switch_latency_ns: float = 150.0
    pcie_link_latency_ns: float = 20.0
    root_complex_latency_ns: float = 200.0
    host_memory_latency_ns: float = 100.0
    gpu_memory_latency_ns: float = 150.0
    socket_link_latency_ns: float = round(CROSS_SOCKET_ROUND_TRIP_NS / 2, 2)
    socket_link_rate_gbps: float = 480.0
    host_memory_rate_gbps: float = 2400.0
    p2p_read_cap_gbps: float = 0.0
    p2p_read_cap_cross_socket_gbps: float = 0.0

    def __post_init__(self):
        for name in ("switch_latency_ns", "pcie_link_latency_ns", "root_complex_latency_ns",
                     "host_memory_latency_ns", "gpu_memory_latency_ns", "socket_link_latency_ns",
                     "p2p_read_cap_gbps", "p2p_read_cap_cross_socket_gbps"):
            check_positive(f"platform.{name}", getattr(self, name), zero_ok=True)
        check_positive("platform.socket_link_rate_gbps", self.socket_link_rate_gbps)
        check_positive("platform.host_memory_rate_gbps", self.host_memory_rate_gbps)


DEFAULT_PLATFORM = PlatformParams()


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
    latency_ns: float = DEFAULT_PLATFORM.pcie_link_latency_ns
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
                # the far root complex of a socket crossing is inside the measured socket
                # penalty (platform.socket_link_latency_ns)
                far_side = node.kind == "root_complex" and link.kind == "socket"
                hops.append((f"{node.kind} {node.name}", 0.0 if far_side else node.latency_ns))
        return hops

    @property
    def one_way_latency_ns(self) -> float:
        """Sum of the hop latencies (endpoints excluded)."""
        return sum_in_order(latency for _, latency in self.hop_latencies_ns)

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
        if operation == "read" and self.is_peer_to_peer and self.p2p_read_cap_gbps:
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
    p2p_read_cap_gbps: float = 0.0              # 0: no platform cap (PlatformParams)
    p2p_read_cap_cross_socket_gbps: float = 0.0
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
        check_positive("p2p_read_cap_gbps", self.p2p_read_cap_gbps, zero_ok=True)
        check_positive("p2p_read_cap_cross_socket_gbps", self.p2p_read_cap_cross_socket_gbps, zero_ok=True)
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
            cap = self.p2p_read_cap_cross_socket_gbps or None
        elif any(node.kind == "root_complex" for node in nodes[1:-1]):
            cap = self.p2p_read_cap_gbps or None
        return Route(nodes, tuple(links), cap)

    def with_links(self, link_config: pcie.LinkConfig) -> "Topology":
        """The same tree with every PCIe link set to ``link_config``."""
        links = tuple(replace(link, pcie=link_config) if link.kind == "pcie" else link for link in self.links)
        return replace(self, links=links, _adjacency=None)


def classify(topology: Topology, a: str, b: str) -> str:
    """Class of the route between two endpoints: one of PATH_CLASSES."""
    return topology.route(a, b).path_class


# --- presets -------------------------------------------------------------------------

def _socket(index: int, platform: PlatformParams) -> list[Node]:
    return [
        Node(f"rc{index}", "root_complex", platform.root_complex_latency_ns, index),
        Node(f"mem{index}", "host_memory", platform.host_memory_latency_ns, index),
    ]


def memory_link(index: int, platform: PlatformParams) -> Link:
    """The memory controller to root complex link of socket ``index``."""
    return Link(f"rc{index}", f"mem{index}", "memory", None, 0.0, platform.host_memory_rate_gbps)


def socket_link(a: str, b: str, platform: PlatformParams) -> Link:
    """The socket interconnect between two root complexes."""
    return Link(a, b, "socket", None, platform.socket_link_latency_ns, platform.socket_link_rate_gbps)


def _build(name, nodes, pcie_pairs, extra_links, link_config, platform) -> Topology:
    config = link_config or pcie.LinkConfig()
    links = [Link(a, b, "pcie", config, platform.pcie_link_latency_ns) for a, b in pcie_pairs]
    links += list(extra_links)
    return Topology(name, tuple(nodes), tuple(links), platform.p2p_read_cap_gbps,
                    platform.p2p_read_cap_cross_socket_gbps)


def _switch(name: str, platform: PlatformParams, socket: int = 0) -> Node:
    return Node(name, "switch", platform.switch_latency_ns, socket)


def _gpu(platform: PlatformParams, socket: int = 0) -> Node:
    return Node("gpu0", "gpu", platform.gpu_memory_latency_ns, socket)


def same_switch(link_config: pcie.LinkConfig | None = None, platform: PlatformParams = DEFAULT_PLATFORM) -> Topology:
    """GPU and NIC below one PCIe switch (nvidia-smi: PIX)."""
    nodes = _socket(0, platform) + [_switch("sw0", platform), _gpu(platform), Node("nic0", "nic", 0.0)]
    pairs = [("rc0", "sw0"), ("sw0", "gpu0"), ("sw0", "nic0")]
    return _build("same_switch", nodes, pairs, [memory_link(0, platform)], link_config, platform)


def across_switches(link_config: pcie.LinkConfig | None = None, platform: PlatformParams = DEFAULT_PLATFORM) -> Topology:
    """GPU and NIC below different switches joined by a switch under one root port (PXB)."""
    nodes = _socket(0, platform) + [_switch("sw_top", platform), _switch("sw_gpu", platform),
                                    _switch("sw_nic", platform), _gpu(platform), Node("nic0", "nic", 0.0)]
    pairs = [("rc0", "sw_top"), ("sw_top", "sw_gpu"), ("sw_top", "sw_nic"),
             ("sw_gpu", "gpu0"), ("sw_nic", "nic0")]
    return _build("across_switches", nodes, pairs, [memory_link(0, platform)], link_config, platform)


def across_root_ports(link_config: pcie.LinkConfig | None = None,
                      platform: PlatformParams = DEFAULT_PLATFORM) -> Topology:
    """GPU and NIC below different root ports of one socket: through the root complex (PHB)."""
    nodes = _socket(0, platform) + [_switch("sw_gpu", platform), _switch("sw_nic", platform),
                                    _gpu(platform), Node("nic0", "nic", 0.0)]
    pairs = [("rc0", "sw_gpu"), ("rc0", "sw_nic"), ("sw_gpu", "gpu0"), ("sw_nic", "nic0")]
    return _build("across_root_ports", nodes, pairs, [memory_link(0, platform)], link_config, platform)


def across_sockets(link_config: pcie.LinkConfig | None = None, platform: PlatformParams = DEFAULT_PLATFORM) -> Topology:
    """GPU on socket 0, NIC on socket 1: through both root complexes and the interconnect (SYS)."""
    nodes = _socket(0, platform) + _socket(1, platform) + [
        _switch("sw_gpu", platform, 0), _switch("sw_nic", platform, 1),
        _gpu(platform, 0), Node("nic0", "nic", 0.0, 1),
    ]
    pairs = [("rc0", "sw_gpu"), ("rc1", "sw_nic"), ("sw_gpu", "gpu0"), ("sw_nic", "nic0")]
    extra = [memory_link(0, platform), memory_link(1, platform), socket_link("rc0", "rc1", platform)]
    return _build("across_sockets", nodes, pairs, extra, link_config, platform)


PRESETS = {
    "same_switch": same_switch,
    "across_switches": across_switches,
    "across_root_ports": across_root_ports,
    "across_sockets": across_sockets,
}


def preset(name: str, link_config: pcie.LinkConfig | None = None,
           platform: PlatformParams = DEFAULT_PLATFORM) -> Topology:
    """A preset topology by name: one of ``PRESETS``."""
    check_choice("topology", name, tuple(PRESETS))
    return PRESETS[name](link_config, platform)
