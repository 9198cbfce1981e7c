"""Adversarial audit of the model: inputs where it gave a physically impossible or
inconsistent answer. Each test names the input and the bound that was broken."""
import numpy as np
import pytest

from gpuwrite.model import nic as nicmod
from gpuwrite.model import paths, pcie, sim
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import Params, Workload


def _pull_lower_bound_ns(params, size):
    """nic_pull at zero load can finish no sooner than: the steps before the payload read,
    one read round trip, the first packet's bytes at the narrowest link's read rate, every
    packet back to back on the network, the flight and the tail."""
    topology = params.build_topology()
    route, gpu = topology.route("gpu0", "nic0"), topology.node("gpu0")
    timing = paths.path_timing("nic_pull", topology, size, params)
    _, link_rate = route.narrowest("read", size)
    first = nicmod.packet_payloads(params.network, size)[0]
    return (timing.stage_ns("pre") + 2 * route.one_way_latency_ns + gpu.latency_ns + first * 8.0 / link_rate
            + timing.wire_busy_ns + timing.stage_ns("flight") + timing.stage_ns("tail"))


@pytest.mark.parametrize("rate_gbps", [400.0, 100.0, 25.0])
def test_a_pulled_packet_is_not_sent_before_its_bytes_came_back_from_the_read(rate_gbps):
    # Across sockets the read engine's Little's-law rate (64 x 512 B per 1.45 us round
    # trip, 185 Gb/s) is below the link's (422 Gb/s). The packets were ready a share of the
    # engine's busy time into the read, the first 8 of 9 long before their completions
    # could have come back: 32 KiB at 100 Gb/s finished 696 ns sooner than its first
    # packet's bytes allow (35.6 ns at 400 Gb/s).
    params = Params(path="nic_pull", topology="across_sockets").updated({"network": {"rate_gbps": rate_gbps}})
    size = 32768
    latency = paths.latency_ns("nic_pull", "across_sockets", size, params)
    assert latency >= _pull_lower_bound_ns(params, size) - 1e-6
    # and the simulator, one message at zero load, agrees with the closed form
    workload = Workload(n_messages=2, size_bytes=size, arrival="open", process="periodic", interval_ns=1e6)
    simulated = sim.simulate(params, workload, 0).messages["latency_ns"].to_numpy()
    assert np.all(np.abs(simulated - latency) < 0.01), (simulated, latency)


def test_a_pulled_message_one_byte_longer_is_not_faster():
    # MTU 256, a P2P read cap of 10 Gb/s: 257 B is 256 B + 1 B. Its first packet was ready
    # 256/257 of the engine's busy time into the read instead of when its bytes were in,
    # and 257 B finished 0.48 ns before 256 B did.
    params = Params(path="nic_pull", topology="across_root_ports").updated({
        "link": {"generation": 2, "width": 32, "mrrs_bytes": 2048},
        "network": {"rate_gbps": 1600.0, "mtu_bytes": 256},
        "nic": {"read_outstanding": 1},
        "platform": {"p2p_read_cap_gbps": 10.0},
    })
    latencies = [paths.latency_ns("nic_pull", "across_root_ports", size, params) for size in range(250, 264)]
    assert all(later >= earlier for earlier, later in zip(latencies, latencies[1:])), latencies


def test_a_host_staged_packet_is_not_sent_before_its_bytes_came_back_from_host_memory():
    # Defaults, a 100 Gb/s network, 32 KiB (one chunk): the GPU copies the chunk, rings,
    # the NIC fetches the WQE and reads the chunk; its first packet's bytes are in one
    # host-memory round trip after the read starts. It finished 226 ns sooner than that.
    params = Params(path="host_staged").updated({"network": {"rate_gbps": 100.0}})
    size = 32768
    topology = params.build_topology()
    memory = topology.host_memory_near("nic0")
    to_memory, from_nic = topology.route("gpu0", memory), topology.route("nic0", memory)
    to_nic = topology.route("gpu0", "nic0")
    round_trip = 2 * from_nic.one_way_latency_ns + topology.node(memory).latency_ns
    copied = params.gpu.write_issue_ns + to_memory.one_way_latency_ns + paths._ser_ns(
        to_memory, "write", size, params.gpu.copy_rate_gbps)
    handoff = (to_nic.one_way_latency_ns + paths._doorbell_ns(to_nic) + params.nic.processing_ns + round_trip
               + paths._ser_ns(from_nic, "read", nicmod.WQE_BASIC_BLOCK_BYTES))
    _, link_rate = from_nic.narrowest("read", size)
    timing = paths.path_timing("host_staged", topology, size, params)
    bound = (copied + handoff + round_trip + 4096 * 8.0 / link_rate + timing.wire_busy_ns
             + timing.stage_ns("flight") + timing.stage_ns("tail"))
    assert timing.latency_ns >= bound - 1e-6
    workload = Workload(n_messages=2, size_bytes=size, arrival="open", process="periodic", interval_ns=1e6)
    simulated = sim.simulate(params, workload, 0).messages["latency_ns"].to_numpy()
    assert np.all(np.abs(simulated - timing.latency_ns) < 0.01), (simulated, timing.latency_ns)


@pytest.mark.parametrize("path", ["nic_pull", "host_staged"])
def test_a_read_paths_packet_shares_keep_the_engines_busy_time(path):
    # the ingress stage is the read engine's busy time (throughput and the simulator's
    # ingress queue); the per-packet shares still add up to it and none is negative
    params = Params(path=path, topology="across_sockets").updated({"network": {"rate_gbps": 100.0}})
    for size in (0, 1, 4096, 4097, 32768, 100_000, 200_000):
        timing = paths.path_timing(path, params.build_topology(), size, params)
        assert min(timing.packet_ingress_ns) >= 0.0
        assert sum(timing.packet_ingress_ns) == pytest.approx(timing.stage_ns("ingress"), rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("path", ["gpu_push", "nic_pull", "host_staged"])
def test_a_message_of_many_packets_agrees_with_the_closed_form_to_the_picosecond(path):
    # 1 MiB in 256-byte packets at 7 Gb/s: 4096 packets whose wire and drain times (and
    # ingress shares) are not whole picoseconds. Each was rounded alone, and one message at
    # zero load came out 1.76 ns off its closed form (0.07 ns for 44918 B at 1600 Gb/s),
    # past the 0.01 ns the zero-load tests allow.
    params = Params(path=path).updated({"network": {"mtu_bytes": 256, "rate_gbps": 7.0},
                                        "receiver": {"drain_rate_gbps": 7.0}})
    for size in (44918, 1 << 20):
        workload = Workload(n_messages=1, size_bytes=size)
        simulated = sim.simulate(params, workload, 0).messages["latency_ns"].iloc[0]
        assert simulated == pytest.approx(paths.latency_ns(path, "same_switch", size, params), abs=0.01), size


@pytest.mark.parametrize("samples", [0, -5, 2.5, True, float("nan"), 10**9])
def test_a_time_series_of_no_whole_number_of_samples_is_refused(samples):
    # 0 silently gave the workload's 1000 samples, -5 and 2.5 numpy's own errors (naming no
    # parameter), 10**9 allocated gigabytes
    result = sim.simulate(Params(), Workload(n_messages=5), 0)
    with pytest.raises(ParamError, match=r"samples=.*an integer from 1 to 1,000,000"):
        result.timeseries(samples)
    assert len(result.timeseries(7)) == 7 and len(result.timeseries()) == result.workload.samples


def test_a_seed_past_what_a_result_table_holds_is_refused():
    # 2**64 was simulated and written into the summary, which a config file (checks.check_seed)
    # and the result tables (int64) refuse
    with pytest.raises(ParamError, match=r"seed=18446744073709551616.*2\*\*63 - 1"):
        sim.simulate(Params(), Workload(n_messages=2), 2**64)
    assert sim.simulate(Params(), Workload(n_messages=2), np.int64(2**63 - 1)).summary["seed"] == 2**63 - 1


def test_a_message_past_the_largest_is_refused_naming_its_size():
    # 2**70 B was refused as "start_address=0 ... from 0 to -1,162,144,876,643,701,751,824"
    with pytest.raises(ParamError, match=r"size_bytes=1180591620717411303424.*2,147,483,648"):
        paths.latency_ns("gpu_push", "same_switch", 2**70)
    with pytest.raises(ParamError, match=r"size_bytes=2147483649.*MAX_MESSAGE_BYTES"):
        paths.path_timing("nic_pull", Params().build_topology(), 2**31 + 1, Params())
    with pytest.raises(ParamError, match=r"size_bytes=8589934592.*32-bit"):
        pcie.wire_bytes(pcie.LinkConfig(address_bits=32), "write", 2**33)
