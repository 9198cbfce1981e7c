"""Topologies: presets, routes, classification, P2P caps, and the sysfs reader."""
from pathlib import Path

import pytest

from gpuwrite.model import pcie, sysfs
from gpuwrite.model import topology as topo
from gpuwrite.model.errors import ParamError


@pytest.mark.parametrize("name", topo.PATH_CLASSES)
def test_each_preset_is_its_own_class(name):
    topology = topo.preset(name)
    assert topo.classify(topology, "gpu0", "nic0") == name


def test_route_latency_is_the_sum_of_its_hops():
    platform = topo.PlatformParams()
    route = topo.preset("same_switch").route("gpu0", "nic0")
    assert [n.name for n in route.nodes] == ["gpu0", "sw0", "nic0"]
    assert route.one_way_latency_ns == 2 * platform.pcie_link_latency_ns + platform.switch_latency_ns
    sockets = topo.preset("across_sockets").route("gpu0", "nic0")
    # the far root complex is inside the measured socket crossing
    expected = (4 * platform.pcie_link_latency_ns + 2 * platform.switch_latency_ns
                + platform.root_complex_latency_ns + platform.socket_link_latency_ns)
    assert sockets.one_way_latency_ns == pytest.approx(expected)
    assert sum(latency for _, latency in sockets.hop_latencies_ns) == pytest.approx(expected)


def test_host_memory_read_round_trip_matches_calibration():
    # calibration: one GPU dependent ld.acquire.sys of host memory takes 1.14 us
    route = topo.preset("same_switch").route("gpu0", "mem0")
    round_trip = 2 * route.one_way_latency_ns + topo.GPU_READ_ISSUE_NS + topo.PlatformParams().host_memory_latency_ns
    assert round_trip == pytest.approx(1140.0)


def test_narrowest_link_and_p2p_read_cap():
    slow = pcie.LinkConfig(generation=3, width=8)
    topology = topo.Topology("mixed", topo.same_switch().nodes, tuple(
        topo.Link(l.a, l.b, l.kind, slow if (l.a, l.b) == ("sw0", "nic0") else l.pcie, l.latency_ns, l.rate_gbps)
        for l in topo.same_switch().links))
    link, rate = topology.route("gpu0", "nic0").narrowest("write", 4096)
    assert (link.a, link.b) == ("sw0", "nic0")
    assert rate == pytest.approx(pcie.effective_rate_gbps(slow, "write", 4096))
    capped = topo.across_root_ports(platform=topo.PlatformParams(p2p_read_cap_gbps=33.0)).route("nic0", "gpu0")
    assert capped.narrowest("read", 4096) == (None, 33.0)
    assert capped.narrowest("write", 4096)[1] > 33.0          # writes are not capped
    assert topo.same_switch().route("nic0", "gpu0").narrowest("read", 4096)[1] > 100.0
    assert topo.across_sockets().route("nic0", "gpu0").narrowest("read", 4096)[0] is not None   # no cap by default
    socket_cap = topo.PlatformParams(p2p_read_cap_cross_socket_gbps=40.0)
    assert topo.across_sockets(platform=socket_cap).route("nic0", "gpu0").narrowest("read", 4096) == (None, 40.0)
    # host memory reads are not peer-to-peer
    assert topo.across_root_ports().route("nic0", "mem0").narrowest("read", 4096)[1] > 100.0


def test_cross_socket_read_penalty_is_the_published_one():
    # pcie-bench/data lat_dma_sizes.csv, 64 B DMA reads, E5-2630v4: 546.7 ns local, 653.3 ns remote
    local = topo.preset("across_sockets").route("nic0", "mem1")
    remote = topo.preset("across_sockets").route("nic0", "mem0")
    assert 2 * (remote.one_way_latency_ns - local.one_way_latency_ns) == pytest.approx(653.3 - 546.7, abs=0.1)


def test_bad_topology_inputs():
    with pytest.raises(ParamError, match="topology='ring'"):
        topo.preset("ring")
    with pytest.raises(ParamError, match="endpoint='gpu9'"):
        topo.preset("same_switch").route("gpu9", "nic0")
    with pytest.raises(ParamError, match="kind"):
        topo.Node("x", "router")


# --- sysfs fixture trees ------------------------------------------------------------
BRIDGE, GPU, NIC, NVME = "0x060400", "0x030200", "0x020700", "0x010802"


def device(parent: Path, bdf: str, cls: str, numa: int = 0, speed: str = "32.0 GT/s PCIe", width: int = 16) -> Path:
    path = parent / bdf
    path.mkdir(parents=True)
    (path / "class").write_text(cls + "\n")
    (path / "numa_node").write_text(f"{numa}\n")
    (path / "current_link_speed").write_text(speed + "\n")
    (path / "current_link_width").write_text(f"{width}\n")
    (path / "power").mkdir()            # noise that is not a device
    return path


def switch(parent: Path, bus: int, numa: int = 0) -> tuple[Path, list[Path]]:
    up = device(parent, f"0000:{bus:02x}:00.0", BRIDGE, numa)
    downs = [device(up, f"0000:{bus + 1:02x}:{i:02x}.0", BRIDGE, numa) for i in range(2)]
    return up, downs


def tree_same_switch(root: Path) -> None:
    rp = device(root / "pci0000:00", "0000:00:01.0", BRIDGE)
    _, (d0, d1) = switch(rp, 0x01)
    device(d0, "0000:03:00.0", GPU)
    device(d1, "0000:04:00.0", NIC, speed="16.0 GT/s PCIe", width=8)
    device(root / "pci0000:00", "0000:00:17.0", NVME)


def tree_across_switches(root: Path) -> None:
    rp = device(root / "pci0000:00", "0000:00:01.0", BRIDGE)
    _, (d0, d1) = switch(rp, 0x01)
    _, (g, _) = switch(d0, 0x10)
    device(g, "0000:20:00.0", GPU)
    _, (n, _) = switch(d1, 0x30)
    device(n, "0000:40:00.0", NIC)


def tree_across_root_ports(root: Path) -> None:
    rp0 = device(root / "pci0000:00", "0000:00:01.0", BRIDGE)
    _, (d0, _) = switch(rp0, 0x01)
    device(d0, "0000:03:00.0", GPU)
    rp1 = device(root / "pci0000:40", "0000:40:01.0", BRIDGE)   # another host bridge, same socket
    device(rp1, "0000:41:00.0", NIC)


def tree_across_sockets(root: Path) -> None:
    rp0 = device(root / "pci0000:00", "0000:00:01.0", BRIDGE, 0)
    device(rp0, "0000:01:00.0", GPU, 0)
    rp1 = device(root / "pci0000:80", "0000:80:01.0", BRIDGE, 1)
    device(rp1, "0000:81:00.0", NIC, 1)


TREES = {"same_switch": tree_same_switch, "across_switches": tree_across_switches,
         "across_root_ports": tree_across_root_ports, "across_sockets": tree_across_sockets}


@pytest.mark.parametrize("expected", topo.PATH_CLASSES)
def test_sysfs_fixture_trees_classify(tmp_path, expected):
    for host_bridge in ("pci0000:00", "pci0000:40", "pci0000:80"):
        (tmp_path / host_bridge).mkdir()
    TREES[expected](tmp_path)
    topology = sysfs.from_sysfs(tmp_path)
    pairs = sysfs.gpu_nic_classes(topology)
    assert len(pairs) == 1
    assert pairs[0][2] == expected
    assert len(topology.endpoints("gpu")) == 1 and len(topology.endpoints("nic")) == 1


def test_sysfs_reads_link_speed_and_width(tmp_path):
    (tmp_path / "pci0000:00").mkdir()
    tree_same_switch(tmp_path)
    topology = sysfs.from_sysfs(tmp_path)
    route = topology.route("0000:03:00.0", "0000:04:00.0")
    link, rate = route.narrowest("write", 4096)
    assert link.b == "0000:04:00.0"
    assert (link.pcie.generation, link.pcie.width) == (4, 8)
    assert route.path_class == "same_switch"


def test_sysfs_bad_directory_names_the_path(tmp_path):
    with pytest.raises(ParamError, match="sysfs path"):
        sysfs.from_sysfs(tmp_path / "missing")
    with pytest.raises(ParamError, match="pciDDDD:BB"):
        sysfs.from_sysfs(tmp_path)


def test_params_can_simulate_on_a_sysfs_tree(tmp_path):
    from gpuwrite.model import paths, sim
    from gpuwrite.model.params import Params, Workload

    for host_bridge in ("pci0000:00", "pci0000:80"):
        (tmp_path / host_bridge).mkdir()
    tree_across_sockets(tmp_path)
    params = Params(topology=f"sysfs:{tmp_path}", path="nic_pull")
    assert params.build_topology().route("0000:01:00.0", "0000:81:00.0").path_class == "across_sockets"
    latency = sim.simulate(params, Workload(n_messages=1, size_bytes=4096), 0).messages["latency_ns"].iloc[0]
    assert latency == pytest.approx(paths.latency_ns("nic_pull", params.build_topology(), 4096, params), abs=0.01)
    with pytest.raises(ParamError, match="topology='ring'"):
        Params(topology="ring")
