"""The gpuwrite model: PCIe accounting, topologies, the NIC with credits, and a fast simulator.

Public API (used by the CLI, ``doctor`` and the experiments):

PCIe accounting (``gpuwrite.model.pcie``)
    ``LinkConfig(generation, width, mps_bytes, mrrs_bytes, rcb_bytes, address_bits, ecrc,
    rcb_chunks)``; ``read_wire_bytes``/``write_wire_bytes``/``wire_bytes(link, op, n,
    start_address)`` -> ``WireBytes`` (bytes per direction); ``completion_sizes``;
    ``raw_rate_gbps``, ``tlp_rate_gbps`` (after ACK/UpdateFC DLLPs and SKIPs);
    ``efficiency(link, op, n)``, ``effective_rate_gbps(link, op, n)``.

Topologies (``gpuwrite.model.topology``, ``gpuwrite.model.sysfs``)
    ``preset(name)`` with names ``same_switch``, ``across_switches``,
    ``across_root_ports``, ``across_sockets`` (``PRESETS``); ``Topology.route(a, b)`` ->
    ``Route`` (hops, ``hop_latencies_ns``, ``one_way_latency_ns``, ``narrowest(op, n)``,
    ``path_class``); ``classify(topology, a, b)``; ``from_sysfs(path)`` builds a Topology
    from a sysfs PCI tree and ``gpu_nic_classes(topology)`` lists every GPU/NIC pair's class.

Parameters (``gpuwrite.model.params``)
    ``Params`` (path, topology: a preset name or ``"sysfs:<dir>"``, link, platform (every
    switch, link, root-complex, socket and memory latency and rate; optional P2P read
    caps), gpu (issue costs, poll interval), nic (staging buffer, ``hold``/``drop``
    policy with its cut-through FIFO, ``fifo``/``round_robin`` scheduler, read engine),
    network (credits), receiver (drain rate, stalls)): ``to_toml``, ``from_toml``,
    ``to_dict``/``from_dict``, ``updated(overrides)``, ``flat()``, ``sources()`` (where each
    value comes from; ``gpuwrite model params``), ``with_calibration(file)`` (a measured
    TOML file becomes "this machine").
    ``Workload`` (sizes, open/closed arrivals, QPs) and ``SimConfig`` (seed + both).

Analytical answers (``gpuwrite.model.paths``)
    ``latency_ns(path, topology, size_bytes, params)``, ``throughput_gbps(...)``,
    ``bottleneck(...)``, ``steps(...)`` (the zero-load breakdown), ``pcie_bytes(...)``,
    ``rank_paths(topology, size_bytes, params, gpu=, nic=)`` (fastest path first: what
    ``doctor`` reports). ``topology`` is a preset name or a ``Topology`` (e.g. from sysfs;
    name the endpoints with ``Params(gpu_name=..., nic_name=...)`` or ``rank_paths``).

Hold buffer (``gpuwrite.model.buffer``)
    ``need(params, share, size_bytes)``: the staging buffer gpu_push needs for a share of
    line rate (Little's law on the staging and credit loops); ``longest_gpu_wait_ns``
    checks it in the simulator (``gpuwrite model buffer``).

Validation (``gpuwrite.model.validation``)
    ``table()``: predictions against pcie-bench's published DMA engine and calibrate files.

Simulation (``gpuwrite.model.sim``)
    ``simulate(params, workload, seed) -> SimResult`` with ``.messages`` (DataFrame, one
    row per message), ``.timeseries(samples)`` (DataFrame) and ``.summary`` (Series).
    ``gpuwrite.model.simpy_ref.simulate_simpy`` is the plain SimPy reference of the same
    model; ``python -m gpuwrite.model.bench`` compares the two.

Every parameter error is a ``ParamError`` (a ``ValueError``) naming the value and what is
allowed.
"""
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import PATHS, Params, SimConfig, Workload
from gpuwrite.model.paths import bottleneck, latency_ns, pcie_bytes, rank_paths, steps, throughput_gbps
from gpuwrite.model.pcie import LinkConfig, effective_rate_gbps, efficiency, wire_bytes
from gpuwrite.model.sim import SimResult, simulate
from gpuwrite.model.sysfs import from_sysfs, gpu_nic_classes
from gpuwrite.model.topology import PATH_CLASSES, PRESETS, Topology, classify, preset

__all__ = [
    "PATHS", "PATH_CLASSES", "PRESETS", "LinkConfig", "ParamError", "Params", "SimConfig", "SimResult",
    "Topology", "Workload", "bottleneck", "classify", "effective_rate_gbps", "efficiency", "from_sysfs",
    "gpu_nic_classes", "latency_ns", "pcie_bytes", "preset", "rank_paths", "simulate", "steps", "throughput_gbps", "wire_bytes",
]
