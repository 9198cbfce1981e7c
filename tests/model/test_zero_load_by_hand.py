"""Zero-load latency of one 4 KiB message (200 B inline) on one switch, every path, summed
here by hand from the named parameters, and checked against the analytic model and the
simulator (not through PathTiming.latency_ns, which is the steps' sum by construction)."""
import pytest

from gpuwrite.model import paths, pcie, sim
from gpuwrite.model.params import Params, Workload

SIZE = 4096
P = Params()
LINK = P.link
PLATFORM = P.platform
TLP_GBPS = pcie.tlp_rate_gbps(LINK)
# GPU - link - switch - link - NIC
GPU_NIC_NS = 2 * PLATFORM.pcie_link_latency_ns + PLATFORM.switch_latency_ns
# GPU (or NIC) - link - switch - link - root complex - memory link (0 ns) - memory
DEVICE_MEMORY_NS = 2 * PLATFORM.pcie_link_latency_ns + PLATFORM.switch_latency_ns + PLATFORM.root_complex_latency_ns


def write_ns(size_bytes, cap_gbps=float("inf")):
    """Serialisation of a posted write at the link's effective write rate (or a cap)."""
    rate = TLP_GBPS * size_bytes / pcie.write_wire_bytes(LINK, size_bytes).data_direction_bytes
    return size_bytes * 8.0 / min(rate, cap_gbps)


def small_write_after_ns(size_bytes):
    """A small write right behind another one: its own wire bytes at the TLP rate."""
    return pcie.write_wire_bytes(LINK, size_bytes).data_direction_bytes * 8.0 / TLP_GBPS


def read_completions_ns(size_bytes):
    wire = pcie.read_wire_bytes(LINK, size_bytes)
    rate = TLP_GBPS * size_bytes / max(wire.data_direction_bytes, wire.other_direction_bytes)
    return size_bytes * 8.0 / rate


NETWORK_NS = (SIZE + P.network.header_bytes) * 8.0 / P.network.rate_gbps + P.network.propagation_ns
TAIL_NS = P.network.propagation_ns + GPU_NIC_NS + write_ns(64)          # ack back, then the CQE


def by_hand(path):
    gpu, nic = P.gpu, P.nic
    if path == "gpu_push":
        return (gpu.write_issue_ns + write_ns(SIZE + 16, gpu.store_rate_gbps) + GPU_NIC_NS
                + small_write_after_ns(64) + nic.processing_ns + NETWORK_NS + TAIL_NS)
    if path == "gpu_push_inline":
        wqe_bytes = 256                      # 16 + 16 + 4 + 200 B, in 64 B blocks
        return (gpu.write_issue_ns + write_ns(wqe_bytes, gpu.store_rate_gbps) + GPU_NIC_NS + nic.processing_ns
                + (200 + P.network.header_bytes) * 8.0 / P.network.rate_gbps + P.network.propagation_ns + TAIL_NS)
    if path == "nic_pull":
        read_trip = 2 * GPU_NIC_NS + PLATFORM.gpu_memory_latency_ns
        doorbell = GPU_NIC_NS + small_write_after_ns(8)
        wqe_fetch = read_trip + read_completions_ns(64)
        # 4 KiB fits the read engine's window: one round trip, then completions at link rate
        payload = read_trip + read_completions_ns(SIZE)
        return gpu.write_issue_ns + doorbell + nic.processing_ns + wqe_fetch + payload + NETWORK_NS + TAIL_NS
    # host_staged, one chunk: copy to host memory, doorbell, WQE fetch, read from host memory
    read_trip = 2 * DEVICE_MEMORY_NS + PLATFORM.host_memory_latency_ns
    copy = gpu.write_issue_ns + DEVICE_MEMORY_NS + write_ns(SIZE, gpu.copy_rate_gbps)
    handoff = GPU_NIC_NS + small_write_after_ns(8) + nic.processing_ns + read_trip + read_completions_ns(64)
    return copy + handoff + read_trip + read_completions_ns(SIZE) + NETWORK_NS + TAIL_NS


@pytest.mark.parametrize("path", ["gpu_push", "gpu_push_inline", "nic_pull", "host_staged"])
def test_zero_load_latency_by_hand(path):
    size = 200 if path == "gpu_push_inline" else SIZE
    expected = by_hand(path)
    params = Params(path=path)
    assert paths.latency_ns(path, "same_switch", size, params) == pytest.approx(expected, abs=1e-6)
    one = sim.simulate(params, Workload(n_messages=1, size_bytes=size), 0).messages["latency_ns"].iloc[0]
    assert one == pytest.approx(expected, abs=0.01)


def test_a_push_forwarded_after_its_doorbell_is_stored_whole_then_sent():
    """nic.push_forwarding = after_doorbell: no packet leaves before the whole payload and
    the doorbell behind it are in; on_arrival (the default) sends each packet once its own
    bytes are in. With the network the slower link, the two differ by the payload's
    ingress less its first packet's."""
    size = 65536
    packets = size // P.network.mtu_bytes
    wire = packets * (P.network.mtu_bytes + P.network.header_bytes) * 8.0 / P.network.rate_gbps
    ingress = write_ns(size + 16, P.gpu.store_rate_gbps)
    stored = Params(path="gpu_push").updated({"nic": {"push_forwarding": "after_doorbell"}})
    expected = (P.gpu.write_issue_ns + ingress + GPU_NIC_NS + small_write_after_ns(64) + P.nic.processing_ns
                + wire + P.network.propagation_ns + TAIL_NS)
    assert paths.latency_ns("gpu_push", "same_switch", size, stored) == pytest.approx(expected, abs=1e-6)
    one = sim.simulate(stored, Workload(n_messages=1, size_bytes=size), 0).messages["latency_ns"].iloc[0]
    assert one == pytest.approx(expected, abs=0.01)
    timing = paths.path_timing("gpu_push", P.build_topology(), size, Params(path="gpu_push"))
    assert max(timing.packet_ingress_ns) < min(timing.packet_wire_ns)      # the network is the slower link
    streamed = paths.latency_ns("gpu_push", "same_switch", size, Params(path="gpu_push"))
    assert expected - streamed == pytest.approx(ingress - timing.packet_ingress_ns[0], abs=1e-6)
    # the inline path's payload comes with its WQE: nothing to forward before the doorbell
    inline = Params(path="gpu_push_inline")
    after = inline.updated({"nic": {"push_forwarding": "after_doorbell"}})
    assert paths.latency_ns("gpu_push_inline", "same_switch", 200, after) == \
        paths.latency_ns("gpu_push_inline", "same_switch", 200, inline)


def test_after_the_doorbell_a_message_must_fit_the_staging_buffer():
    stored = Params(path="gpu_push").updated({"nic": {"push_forwarding": "after_doorbell"}})
    with pytest.raises(paths.ParamError, match="staging_buffer_bytes"):
        paths.latency_ns("gpu_push", "same_switch", 1 << 20, stored)
    big = stored.updated({"nic": {"staging_buffer_bytes": 2 << 20}})
    assert paths.latency_ns("gpu_push", "same_switch", 1 << 20, big) > 0
