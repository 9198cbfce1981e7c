"""path_timing keeps its last answers: latency, throughput and PCIe bytes of one message
compute its timing once, and any other argument (a parameter, the topology, the size)
gives its own."""
import dataclasses

import pytest

from gpuwrite.model import paths
from gpuwrite.model.params import Params


def test_one_messages_latency_and_throughput_share_one_timing():
    params = Params()
    topology = params.build_topology()
    paths._path_timing.cache_clear()
    paths.latency_ns("gpu_push", topology, 123457, params)
    paths.throughput_gbps("gpu_push", topology, 123457, params)
    paths.pcie_bytes("gpu_push", topology, 123457, params)
    info = paths._path_timing.cache_info()
    assert (info.misses, info.hits) == (1, 2)


def test_another_argument_is_another_timing():
    params = Params()
    topology = params.build_topology()
    base = paths.latency_ns("nic_pull", topology, 65536, params)
    slower = dataclasses.replace(params, nic=dataclasses.replace(params.nic,
                                                                 processing_ns=params.nic.processing_ns + 1000))
    assert paths.latency_ns("nic_pull", topology, 65536, slower) == pytest.approx(base + 1000)
    assert paths.latency_ns("nic_pull", topology, 65536, params) == base
    assert paths.latency_ns("nic_pull", topology, 65537, params) != base
    other = dataclasses.replace(params, topology="across_sockets").build_topology()
    assert paths.latency_ns("nic_pull", other, 65536, params) != base
