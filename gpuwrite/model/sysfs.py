"""Build a ``Topology`` from a Linux sysfs PCI device tree (``/sys/devices``).

Layout read: ``pciDDDD:BB`` host-bridge directories, each holding device directories named
by bus/device/function (``0000:00:01.0``) nested as the bus hierarchy is. Files used per
device: ``class`` (0x0604xx bridge, 0x03xxxx display = GPU, 0x02xxxx network = NIC),
``numa_node``, ``current_link_speed`` ("32.0 GT/s PCIe") and ``current_link_width``.

Mapping: one root complex node per socket (NUMA node); root ports are part of it; a
switch is its upstream port together with its downstream ports; each GPU and NIC is an
endpoint; each socket gets a host-memory node; sockets are joined by the interconnect.
"""
from __future__ import annotations

import re
from pathlib import Path

from gpuwrite.model import pcie
from gpuwrite.model import topology as topo
from gpuwrite.model.errors import ParamError

_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}$")
# Link speed in GT/s to generation: PCIe Base Spec Table 4-1.
_SPEED_TO_GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def _read(path: Path, name: str) -> str | None:
    try:
        return (path / name).read_text().strip()
    except OSError:
        return None


def _class_code(path: Path) -> int:
    text = _read(path, "class")
    try:
        return int(text, 16) if text else 0
    except ValueError:
        return 0


def _is_bridge(path: Path) -> bool:
    return (_class_code(path) >> 8) == 0x0604


def _endpoint_kind(path: Path) -> str | None:
    base_class = _class_code(path) >> 16
    return {0x03: "gpu", 0x02: "nic"}.get(base_class)


def _numa_node(path: Path) -> int:
    text = _read(path, "numa_node")
    try:
        return max(int(text), 0) if text else 0
    except ValueError:
        return 0


def generation_of(speed: str | None) -> int | None:
    """The PCIe generation of a ``current_link_speed`` text ("32.0 GT/s PCIe"): a number,
    then GT/s, of a known generation; None for anything else ("Unknown", "1.2.3 GT/s",
    which float() refused with a ValueError)."""
    match = re.match(r"(\d+(?:\.\d+)?)\s*GT/s", speed or "")
    return _SPEED_TO_GENERATION.get(float(match.group(1))) if match else None


def link_config_of(path: Path, default: pcie.LinkConfig | None = None) -> pcie.LinkConfig:
    """The link above a device, from its current speed and width (defaults where absent
    or unreadable)."""
    base = default or pcie.LinkConfig()
    generation = generation_of(_read(path, "current_link_speed")) or base.generation
    width = base.width
    text = _read(path, "current_link_width")
    if text and text.isdigit() and int(text) in pcie.LINK_WIDTHS:
        width = int(text)
    return pcie.LinkConfig(generation, width, base.mps_bytes, base.mrrs_bytes, base.rcb_bytes,
                           base.address_bits, base.ecrc, base.rcb_chunks)


def _children(path: Path) -> list[Path]:
    return sorted(child for child in path.iterdir() if child.is_dir() and _BDF.match(child.name))


def _first_numa(path: Path) -> int:
    for child in sorted(path.rglob("numa_node")):
        return _numa_node(child.parent)
    return 0


def from_sysfs(root: str | Path = "/sys/devices", name: str = "sysfs",
               default_link: pcie.LinkConfig | None = None,
               platform: topo.PlatformParams = topo.DEFAULT_PLATFORM) -> topo.Topology:
    """Read the PCI tree under ``root`` into a Topology (GPUs and NICs named by BDF).

    Latencies come from ``platform`` (sysfs holds none)."""
    root = Path(root)
    if not root.is_dir():
        raise ParamError("sysfs path", str(root), "a directory holding pciDDDD:BB host bridges")
    host_bridges = sorted(p for p in root.iterdir() if p.is_dir() and _HOST_BRIDGE.match(p.name))
    if not host_bridges:
        raise ParamError("sysfs path", str(root), "a directory holding pciDDDD:BB host bridges")
    nodes: dict[str, topo.Node] = {}
    links: list[topo.Link] = []

    def add_endpoint_or_switch(device: Path, attach: str, socket: int, role: str) -> None:
        # role: what `attach` is, "root_complex" or "switch"
        if _is_bridge(device):
            if role == "root_complex":        # a root port: part of the root complex
                for child in _children(device):
                    add_endpoint_or_switch(child, attach, socket, "root_port_child")
                return
            # a switch's upstream port: the switch node; its children are downstream ports
            switch = device.name
            nodes[switch] = topo.Node(switch, "switch", platform.switch_latency_ns, socket)
            links.append(topo.Link(attach, switch, "pcie", link_config_of(device, default_link),
                                   platform.pcie_link_latency_ns))
            for downstream in _children(device):
                for child in _children(downstream):
                    add_endpoint_or_switch(child, switch, socket, "switch")
            return
        kind = _endpoint_kind(device)
        if kind is None:
            return
        latency = platform.gpu_memory_latency_ns if kind == "gpu" else 0.0
        nodes[device.name] = topo.Node(device.name, kind, latency, socket)
        links.append(topo.Link(attach, device.name, "pcie", link_config_of(device, default_link),
                               platform.pcie_link_latency_ns))

    sockets = []
    for bridge in host_bridges:
        socket = _first_numa(bridge)
        rc = f"rc{socket}"
        if socket not in sockets:
            sockets.append(socket)
            nodes[rc] = topo.Node(rc, "root_complex", platform.root_complex_latency_ns, socket)
            nodes[f"mem{socket}"] = topo.Node(f"mem{socket}", "host_memory", platform.host_memory_latency_ns, socket)
            links.append(topo.memory_link(socket, platform))
        for device in _children(bridge):
            add_endpoint_or_switch(device, rc, socket, "root_complex")
    sockets.sort()
    for left, right in zip(sockets, sockets[1:]):
        links.append(topo.socket_link(f"rc{left}", f"rc{right}", platform))
    return topo.Topology(name, tuple(nodes.values()), tuple(links), platform.p2p_read_cap_gbps,
                         platform.p2p_read_cap_cross_socket_gbps)


def gpu_nic_classes(topology: topo.Topology) -> list[tuple[str, str, str]]:
    """(gpu, nic, path class) for every GPU and NIC pair, as ``doctor`` reports them."""
    return [(gpu.name, nic.name, topo.classify(topology, gpu.name, nic.name))
            for gpu in topology.endpoints("gpu") for nic in topology.endpoints("nic")]
