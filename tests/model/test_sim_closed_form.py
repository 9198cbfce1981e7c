"""The simulator against closed forms: zero-load latency, saturated throughput, Little's law."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwrite.model import _core, paths, pcie, sim
from gpuwrite.model import topology as topo
from gpuwrite.model.params import PATHS, Params, Workload


def sizes_for(path):
    return (0, 64, 200) if path == "gpu_push_inline" else (64, 4096, 100_000)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", topo.PATH_CLASSES)
def test_zero_load_latency_equals_the_sum_of_the_hops(path, name):
    params = Params(path=path, topology=name)
    for size in sizes_for(path):
        workload = Workload(n_messages=3, arrival="open", process="periodic", interval_ns=1e6, size_bytes=size)
        latencies = sim.simulate(params, workload, seed=0).messages["latency_ns"].to_numpy()
        expected = sum(step.latency_ns for step in paths.steps(path, name, size, params))
        assert np.all(np.abs(latencies - expected) < 0.01), (size, latencies, expected)


@pytest.mark.parametrize("name", topo.PATH_CLASSES)
def test_zero_load_latency_of_a_push_stored_whole_equals_the_sum_of_the_hops(name):
    params = Params(path="gpu_push", topology=name).updated({"nic": {"push_forwarding": "after_doorbell"}})
    for size in sizes_for("gpu_push"):
        workload = Workload(n_messages=3, arrival="open", process="periodic", interval_ns=1e6, size_bytes=size)
        latencies = sim.simulate(params, workload, seed=0).messages["latency_ns"].to_numpy()
        expected = sum(step.latency_ns for step in paths.steps("gpu_push", name, size, params))
        assert np.all(np.abs(latencies - expected) < 0.01), (size, latencies, expected)


def test_stage_times_of_one_message_follow_the_steps():
    params = Params(path="gpu_push", topology="across_sockets")
    row = sim.simulate(params, Workload(n_messages=1, size_bytes=4096), 0).messages.iloc[0]
    timing = paths.path_timing("gpu_push", params.build_topology(), 4096, params)
    assert row["at_nic_ns"] == pytest.approx(sum(timing.stage_ns(s) for s in ("pre", "ingress", "post")), abs=0.01)
    assert row["tx_end_ns"] - row["tx_start_ns"] == pytest.approx(timing.stage_ns("wire"), abs=0.01)


def test_saturated_throughput_equals_the_narrowest_links_effective_bandwidth():
    # a Gen3 x8 tree behind a 400 Gb/s network: PCIe is the narrowest link
    size = 65536
    params = Params(path="gpu_push", link=pcie.LinkConfig(generation=3, width=8)).updated(
        {"network": {"vl_buffer_bytes": 1 << 20}, "nic": {"staging_buffer_bytes": 4 << 20}})
    workload = Workload(n_messages=3000, size_bytes=size, n_qps=4, outstanding=8)
    measured = sim.simulate(params, workload, 0).summary["throughput_gbps"]
    narrowest = pcie.effective_rate_gbps(params.link, "write", size)
    assert paths.bottleneck("gpu_push", "same_switch", size, params)[0] == "pcie"
    assert measured == pytest.approx(narrowest, rel=0.01)
    assert measured == pytest.approx(paths.throughput_gbps("gpu_push", "same_switch", size, params), rel=0.01)


def test_saturated_pull_across_root_complex_hits_the_p2p_cap():
    params = Params(path="nic_pull", topology="across_root_ports").updated({"platform": {"p2p_read_cap_gbps": 60.0}})
    workload = Workload(n_messages=3000, size_bytes=16384, n_qps=4, outstanding=8)
    measured = sim.simulate(params, workload, 0).summary["throughput_gbps"]
    assert measured == pytest.approx(60.0, rel=0.01)


def test_saturated_throughput_under_receiver_stalls_follows_the_duty_cycle():
    params = Params().updated({"receiver": {"drain_rate_gbps": 100.0, "stall_period_ns": 10_000.0,
                                            "stall_duration_ns": 2_500.0}})
    workload = Workload(n_messages=20000, size_bytes=4096, n_qps=4, outstanding=16)
    measured = sim.simulate(params, workload, 0).summary["throughput_gbps"]
    drain_payload_gbps = 100.0 * 4096 / (4096 + 42) * 0.75
    assert measured == pytest.approx(drain_payload_gbps, rel=0.02)
    assert paths.bottleneck("gpu_push", "same_switch", 4096, params)[0] == "receiver"


def test_littles_law_holds_on_the_nic_hold_queue():
    size = 4096
    params = Params().updated({"network": {"vl_buffer_bytes": 32768},
                               "receiver": {"stall_period_ns": 20_000.0, "stall_duration_ns": 4_000.0}})
    workload = Workload(n_messages=20000, size_bytes=size, arrival="open", process="poisson", interval_ns=120.0,
                        samples=50_000)
    result = sim.simulate(params, workload, seed=5)
    records = result.messages
    series = result.timeseries()
    span_ns = series["time_ns"].iloc[-1]
    # L: time-average number of messages held in the NIC, sampled from the time series
    held_messages = (series["held_bytes"] / size).mean()
    # lambda * W from the per-message records
    arrival_rate = len(records) / span_ns
    wait_ns = (records["tx_end_ns"] - records["at_nic_ns"]).mean()
    assert held_messages > 1.0  # the queue is really used
    assert held_messages == pytest.approx(arrival_rate * wait_ns, rel=0.02)
    # the same for the whole system: issue to completion
    in_system = np.array([np.count_nonzero((records["arrival_ns"] <= t) & (records["done_ns"] > t))
                          for t in series["time_ns"].to_numpy()[::50]])
    assert in_system.mean() == pytest.approx(arrival_rate * records["latency_ns"].mean(), rel=0.03)


def test_summary_pcie_bytes_are_the_per_message_accounting_summed():
    params = Params(path="nic_pull", topology="across_root_ports")
    workload = Workload(n_messages=400, size_kind="choice", sizes_bytes=(64, 1000, 9000), arrival="open")
    result = sim.simulate(params, workload, 3)
    topology = params.build_topology()
    for key in ("gpu_out", "gpu_in", "nic_in", "nic_out"):
        expected = sum(paths.pcie_bytes("nic_pull", topology, int(size), params)[key] for size in result.inputs.sizes)
        assert result.summary[f"pcie_{key}_bytes"] == expected


def drained_ps_by_ps(start, work, period, duration, offset):
    """The receiver's stall rule stepped one picosecond at a time (small numbers only)."""
    t = start
    while work > 0:
        if (t - offset) % period >= duration:
            work -= 1
        t += 1
    return t


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.data())
def test_stall_finish_matches_a_ps_by_ps_drain_whatever_window_it_starts_from(period, data):
    duration = data.draw(st.integers(1, period - 1)) if period > 1 else 0
    offset = data.draw(st.integers(-100, 100))
    window = _core.INFINITY
    for start, work in data.draw(st.lists(st.tuples(st.integers(0, 300), st.integers(1, 120)), min_size=1, max_size=8)):
        end, window = _core.stall_finish_ps(start, work, period, duration, offset, window)
        if duration == 0:
            assert end == start + work
            continue
        assert end == drained_ps_by_ps(start, work, period, duration, offset), (start, work, window)
        assert (window - offset) % period == 0 and window < end     # a real window, met on the way
