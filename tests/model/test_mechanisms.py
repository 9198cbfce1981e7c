"""The packet-level mechanisms against closed forms computed here from named parameters:
per-packet credits, cut-through through a small VL buffer, the read engine (Little's law),
the staging-credit feedback delay, drop as FIFO overflow, the exact staging peak."""
import pytest

from gpuwrite.model import nic as nicmod
from gpuwrite.model import paths, pcie, sim
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import Params, Workload

MIB = 1 << 20


def packet_wire_ns(params, payload_bytes):
    return (payload_bytes + params.network.header_bytes) * 8.0 / params.network.rate_gbps


def test_a_packet_takes_its_own_credits_in_64_byte_blocks():
    network = Params().network
    # 4096 B + 42 B of headers = 4138 B: 65 blocks of 64 B; a 1 MiB message is 256 such packets
    assert nicmod.packet_credits(network, 4096) == 65
    assert nicmod.packet_credits(network, 22) == 1
    assert nicmod.packet_payloads(network, MIB) == [4096] * 256
    assert nicmod.packet_payloads(network, 5000) == [4096, 904]
    assert nicmod.credits_needed(network, MIB) == 256 * 65 > network.credits_total


@pytest.mark.parametrize("path", ["gpu_push", "nic_pull", "host_staged"])
def test_a_1_mib_message_streams_through_a_256_kib_vl_buffer_at_line_rate(path):
    # enough outstanding reads that host_staged's read of host memory is not the limit
    params = Params(path=path).updated({"nic": {"read_outstanding": 128}})
    assert params.network.vl_buffer_bytes == 256 * 1024
    line_rate = params.network.rate_gbps * 4096 / (4096 + params.network.header_bytes)
    assert paths.throughput_gbps(path, "same_switch", MIB, params) == pytest.approx(line_rate, rel=1e-9)
    workload = Workload(n_messages=40, size_bytes=MIB, n_qps=2, outstanding=2)
    summary = sim.simulate(params, workload, 0).summary      # accepted, as the analytic model is
    assert summary["throughput_gbps"] == pytest.approx(line_rate, rel=0.01)


def test_credits_are_taken_per_packet_when_it_is_sent():
    # an 8 KiB VL buffer holds 128 credits: one 65-credit packet at a time, so each packet
    # waits for the previous one's credits: wire + flight + drain + update + flight back
    params = Params().updated({"network": {"vl_buffer_bytes": 8192}})
    network = params.network
    wire = packet_wire_ns(params, 4096)
    drain = (4096 + network.header_bytes) * 8.0 / params.receiver.drain_rate_gbps
    period_ns = wire + network.propagation_ns + drain + network.credit_update_delay_ns + network.propagation_ns
    result = sim.simulate(params, Workload(n_messages=3, size_bytes=MIB, n_qps=1, outstanding=1), 0)
    starts = result.raw["p_tx_start"][:256] / sim.PS_PER_NS
    gaps = starts[1:] - starts[:-1]
    assert gaps == pytest.approx([period_ns] * 255, abs=0.002)
    assert result.summary["credits_min"] == network.credits_total - 65
    assert paths.throughput_gbps("gpu_push", "same_switch", MIB, params) == pytest.approx(
        4096 * 8.0 / period_ns, rel=1e-9)


def _read_round_trip_ns(params):
    platform = params.platform
    one_way = 2 * platform.pcie_link_latency_ns + platform.switch_latency_ns   # GPU - switch - NIC
    return 2 * one_way + platform.gpu_memory_latency_ns


@pytest.mark.parametrize("outstanding", [1, 2, 4, 8, 16, 64])
def test_read_bandwidth_follows_littles_law_until_the_link_saturates(outstanding):
    params = Params(path="nic_pull").updated({
        "nic": {"read_outstanding": outstanding, "read_request_overhead_ns": 0.0},
        "network": {"rate_gbps": 4000.0}, "receiver": {"drain_rate_gbps": 4000.0}})
    link_rate = pcie.effective_rate_gbps(params.link, "read", 65536)
    expected = min(link_rate, outstanding * params.link.mrrs_bytes * 8.0 / _read_round_trip_ns(params))
    assert paths.throughput_gbps("nic_pull", "same_switch", 65536, params) == pytest.approx(expected, rel=1e-9)
    workload = Workload(n_messages=400, size_bytes=65536, n_qps=4, outstanding=4)
    measured = sim.simulate(params, workload, 0).summary["throughput_gbps"]
    assert measured == pytest.approx(expected, rel=0.02)


def test_the_read_engine_pays_its_per_request_overhead():
    params = Params(path="nic_pull").updated({"nic": {"read_request_overhead_ns": 16.0}})
    # 64 B requests at one per 16 ns: 32 Gb/s (the NFP6000's 64 B DMA rate in pcie-bench)
    assert paths.throughput_gbps("nic_pull", "same_switch", 64, params) == pytest.approx(64 * 8 / 16.0)


def test_staging_space_comes_back_after_the_feedback_delay():
    # a staging buffer that holds one 4 KiB packet: each message waits for the previous
    # one's space, which the GPU sees a posted write and one poll after the packet left
    params = Params().updated({"nic": {"staging_buffer_bytes": 4112}})
    timing = paths.path_timing("gpu_push", params.build_topology(), 4096, params)
    platform = params.platform
    one_way = 2 * platform.pcie_link_latency_ns + platform.switch_latency_ns
    doorbell_write_ns = (8 + pcie.write_tlp_overhead_bytes(params.link)) * 8.0 / pcie.tlp_rate_gbps(params.link)
    feedback_ns = one_way + doorbell_write_ns + params.gpu.poll_interval_ns
    assert timing.staging_return_ns == pytest.approx(feedback_ns)
    period_ns = (sum(timing.stage_ns(stage) for stage in ("pre", "ingress", "post")) + packet_wire_ns(params, 4096)
                 + feedback_ns)
    result = sim.simulate(params, Workload(n_messages=50, size_bytes=4096, n_qps=1, outstanding=8), 0)
    reserves = result.messages["reserve_ns"].to_numpy()
    assert reserves[2:] - reserves[1:-1] == pytest.approx([period_ns] * 48, abs=0.003)
    # a slower poll costs throughput: the feedback delay is in the loop
    slower = params.updated({"gpu": {"poll_interval_ns": 2000.0}})
    assert sim.simulate(slower, Workload(n_messages=50, size_bytes=4096, n_qps=1, outstanding=8), 0).summary[
        "throughput_gbps"] < result.summary["throughput_gbps"]


def test_drop_loses_exactly_what_overflows_the_fifo():
    # the receiver stalls from 0 for a second: a 16 KiB VL buffer (256 credits) lets three
    # 4 KiB packets (65 credits each) go, a FIFO of five packets holds five more, the rest
    # of 20 messages arriving back to back overflow it and are lost
    params = Params().updated({
        "nic": {"policy": "drop", "fifo_bytes": 5 * 4096},
        "network": {"vl_buffer_bytes": 16384},
        "receiver": {"stall_period_ns": 1e9, "stall_duration_ns": 1e9 - 1.0}})
    workload = Workload(n_messages=20, size_bytes=4096, arrival="open", process="periodic", interval_ns=1.0)
    summary = sim.simulate(params, workload, 0).summary
    assert summary["dropped"] == 20 - 3 - 5
    assert summary["dropped_bytes"] == 12 * 4096
    assert summary["delivered"] == 8
    # with hold, the same traffic waits instead
    held = sim.simulate(params.updated({"nic": {"policy": "hold"}}), workload, 0).summary
    assert held["dropped"] == 0


def test_staging_peak_is_exact_not_sampled():
    params = Params()
    result = sim.simulate(params, Workload(n_messages=1, size_bytes=4096, samples=1), 0)
    assert result.summary["staging_peak_bytes"] == 4096 + nicmod.STAGE_HEADER_BYTES
    four = sim.simulate(params, Workload(n_messages=4, size_bytes=4096, n_qps=4, outstanding=1,
                                         issue_gap_ns=0.001, samples=1), 0)
    assert four.summary["staging_peak_bytes"] == 4 * (4096 + nicmod.STAGE_HEADER_BYTES)


def test_a_packet_larger_than_the_vl_buffer_is_refused_with_its_name():
    params = Params().updated({"network": {"vl_buffer_bytes": 4096}})
    with pytest.raises(ParamError, match=r"network.vl_buffer_bytes=4096.*65 credits"):
        sim.prepare(params, Workload(n_messages=1, size_bytes=8192), 0)
