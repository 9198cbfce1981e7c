"""Properties of the simulator, checked with hypothesis on random small runs."""
import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwrite.model import sim
from gpuwrite.model.params import Params, Workload

PROPERTY_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def runs(draw, policies=("hold", "drop"), paths=("gpu_push", "gpu_push_inline", "nic_pull", "host_staged")):
    path = draw(st.sampled_from(paths))
    top = 220 if path == "gpu_push_inline" else 8192
    sizes = tuple(draw(st.lists(st.integers(0, top), min_size=1, max_size=4)))
    period = draw(st.sampled_from([0.0, 3000.0, 20000.0]))
    policy = draw(st.sampled_from(policies))
    push_hold = path.startswith("gpu_push") and policy == "hold"
    scheduler = draw(st.sampled_from(["fifo", "round_robin"])) if push_hold else "fifo"
    params = Params(path=path, topology=draw(st.sampled_from(["same_switch", "across_sockets"]))).updated({
        "nic": {"policy": policy, "scheduler": scheduler,
                "staging_buffer_bytes": draw(st.sampled_from([16384, 65536, 1 << 20])),
                "fifo_bytes": draw(st.sampled_from([0, 4096, 16384, 65536])),
                "read_outstanding": draw(st.sampled_from([1, 8, 64])),
                "push_forwarding": draw(st.sampled_from(["on_arrival", "after_doorbell"]))},
        "gpu": {"poll_interval_ns": draw(st.sampled_from([0.0, 150.0, 2000.0]))},
        "network": {"vl_buffer_bytes": draw(st.sampled_from([16384, 32768, 262144])),
                    "credit_update_delay_ns": draw(st.sampled_from([0.0, 500.0, 5000.0]))},
        "receiver": {"drain_rate_gbps": draw(st.sampled_from([50.0, 400.0])), "stall_period_ns": period,
                     "stall_duration_ns": period * draw(st.sampled_from([0.0, 0.25, 0.9]))},
    })
    workload = Workload(
        n_messages=draw(st.integers(1, 300)), n_qps=draw(st.integers(1, 4)), outstanding=draw(st.integers(1, 8)),
        size_kind="choice", sizes_bytes=sizes, arrival=draw(st.sampled_from(["open", "closed"])),
        interval_ns=draw(st.sampled_from([5.0, 50.0, 500.0])), samples=200)
    if workload.arrival == "open" and draw(st.booleans()):
        workload = Workload(**{**workload.to_dict(), "qp_weights": [1.0 + k for k in range(workload.n_qps)]})
    return params, workload, draw(st.integers(0, 2**16))


@PROPERTY_SETTINGS
@given(runs())
def test_bytes_sent_are_delivered_held_in_flight_or_dropped_at_every_sample(run):
    params, workload, seed = run
    result = sim.simulate(params, workload, seed)
    series = result.timeseries()
    books = series["delivered_bytes"] + series["in_flight_bytes"] + series["held_bytes"] + series["dropped_bytes"]
    assert (series["sent_bytes"] == books).all()
    for column in ("delivered_bytes", "in_flight_bytes", "held_bytes", "dropped_bytes", "staging_bytes"):
        assert (series[column] >= 0).all(), column
    assert series["sent_bytes"].iloc[-1] == result.inputs.sizes.sum()
    assert (series["credits_available"] >= 0).all()
    assert (series["credits_available"] <= params.network.credits_total).all()
    assert series["credits_available"].iloc[-1] == params.network.credits_total
    assert ((series["link_utilisation"] >= -1e-9) & (series["link_utilisation"] <= 1 + 1e-9)).all()
    if params.nic.policy == "hold" and params.path.startswith("gpu_push"):
        assert (series["staging_bytes"] <= params.nic.staging_buffer_bytes).all()


@PROPERTY_SETTINGS
@given(runs(policies=("hold",)))
def test_hold_never_drops_and_keeps_stations_in_order(run):
    params, workload, seed = run
    records = sim.simulate(params, workload, seed).messages
    assert not records["dropped"].any()
    # cut-through: the first packet may leave before the last one is in (at_nic)
    for order in (["arrival_ns", "reserve_ns", "tx_start_ns", "tx_end_ns", "received_ns", "done_ns"],
                  ["reserve_ns", "at_nic_ns", "tx_end_ns"]):
        for earlier, later in zip(order, order[1:]):
            assert (records[earlier] <= records[later]).all(), (earlier, later)
    result = sim.simulate(params, workload, seed)
    raw, inputs = result.raw, result.inputs
    order = np.argsort(raw["p_tx_start"], kind="stable")    # one packet on the link at a time
    starts = raw["p_tx_start"][order]
    ends = starts + inputs.pkt_wire[raw["p_table"][order]]
    assert (starts[1:] >= ends[:-1]).all()
    if params.nic.scheduler == "fifo":   # one message after the other
        assert (records["tx_start_ns"].iloc[1:].to_numpy() >= records["tx_end_ns"].iloc[:-1].to_numpy()).all()
    # credits are taken per packet: never more out than the VL buffer holds
    assert result.summary["credits_min"] >= 0
    if params.path.startswith("gpu_push"):
        assert result.summary["staging_peak_bytes"] <= params.nic.staging_buffer_bytes


@PROPERTY_SETTINGS
@given(runs(policies=("drop",), paths=("gpu_push", "gpu_push_inline")))
def test_drop_loses_a_packet_exactly_when_it_overflows_the_fifo(run):
    params, workload, seed = run
    result = sim.simulate(params, workload, seed)
    raw, inputs = result.raw, result.inputs
    size_bytes = inputs.pkt_bytes[raw["p_table"]]
    message = np.repeat(np.arange(len(inputs.sizes)), inputs.count_u[inputs.size_index])
    lost_messages = set()
    for k in range(len(size_bytes)):
        if message[k] in lost_messages:      # the rest of a broken message is discarded
            assert raw["p_tx_start"][k] == -1
            continue
        # bytes in the FIFO when packet k arrives: earlier packets accepted, not yet sending
        earlier = np.arange(k)
        waiting = earlier[(raw["p_tx_start"][:k] > raw["p_ready"][k])]
        overflow = size_bytes[waiting].sum() + size_bytes[k] > params.nic.fifo_bytes
        assert (raw["p_tx_start"][k] == -1) == overflow, k
        if overflow:
            lost_messages.add(message[k])
    assert sorted(lost_messages) == list(np.nonzero(raw["dropped"])[0])


@PROPERTY_SETTINGS
@given(runs())
def test_a_seed_reproduces_a_run_bit_for_bit(run):
    params, workload, seed = run
    first = sim.simulate(params, workload, seed)
    second = sim.simulate(params, workload, seed)
    for key in first.raw:
        assert np.array_equal(first.raw[key], second.raw[key]), key
    pd.testing.assert_frame_equal(first.messages, second.messages)
    pd.testing.assert_frame_equal(first.timeseries(), second.timeseries())


def test_another_seed_gives_another_run():
    params = Params()
    workload = Workload(n_messages=500, size_kind="uniform", min_bytes=64, max_bytes=8192, arrival="open")
    a, b = sim.simulate(params, workload, 1), sim.simulate(params, workload, 2)
    assert not np.array_equal(a.inputs.sizes, b.inputs.sizes)
    assert not np.array_equal(a.raw["done"], b.raw["done"])


def test_drop_loses_messages_where_hold_keeps_them():
    base = Params().updated({"network": {"vl_buffer_bytes": 16384},
                             "receiver": {"stall_period_ns": 10000.0, "stall_duration_ns": 5000.0}})
    workload = Workload(n_messages=2000, size_bytes=4096, n_qps=4, outstanding=8)
    held = sim.simulate(base, workload, 0).summary
    dropped = sim.simulate(base.updated({"nic": {"policy": "drop"}}), workload, 0).summary
    assert held["dropped"] == 0 and held["delivered"] == 2000
    assert dropped["dropped"] > 0
    assert dropped["dropped_bytes"] == 4096 * dropped["dropped"]
    assert held["staging_peak_bytes"] > 16384


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_fast_core_and_simpy_reference_agree_on_random_runs(run):
    from gpuwrite.model.simpy_ref import run_simpy

    params, workload, seed = run
    inputs = sim.prepare(params, workload, seed)
    fast, reference = sim.run_fast(inputs), run_simpy(inputs)
    for key in fast:
        assert np.array_equal(fast[key], reference[key]), key


def test_a_message_dropped_after_its_first_packet_still_returns_that_packets_credits():
    """Found by the property above: with ``drop``, a 4097-byte message whose second packet
    overflows the FIFO has sent its first; the books must run until that packet's credits
    are back (they ended at the last message-level return, 65 blocks short)."""
    from gpuwrite.model.params import Params, Workload

    params = Params().updated({
        "path": "gpu_push", "topology": "same_switch", "gpu": {"poll_interval_ns": 0.0},
        "nic": {"staging_buffer_bytes": 16384, "policy": "drop", "read_outstanding": 1, "fifo_bytes": 4096},
        "network": {"vl_buffer_bytes": 16384, "credit_update_delay_ns": 0.0},
        "receiver": {"drain_rate_gbps": 50.0}})
    workload = Workload(n_messages=6, n_qps=1, size_kind="choice", size_bytes=4096, sizes_bytes=(4097,),
                        arrival="closed", outstanding=3, issue_gap_ns=10.0, samples=200)
    result = sim.simulate(params, workload, 0)
    assert result.raw["dropped"].any()                                   # the case is exercised
    assert ((result.raw["p_tx_start"] >= 0) & (result.raw["p_table"] >= 0)).sum() > 0
    assert result.timeseries()["credits_available"].iloc[-1] == params.network.credits_total


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1 << 22), max_size=200), st.sampled_from([0, 1, 1 << 19, 1 << 21]))
def test_distinct_sizes_equal_numpy_unique(values, shift):
    sizes = np.asarray(values, np.int64) + shift
    unique, inverse = sim.distinct_sizes(sizes)
    expected_unique, expected_inverse = np.unique(sizes, return_inverse=True)
    assert unique.dtype == np.int64 and inverse.dtype == np.int64
    assert np.array_equal(unique, expected_unique) and np.array_equal(inverse, expected_inverse)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20), st.integers(0, 9)), max_size=40))
def test_peak_is_the_largest_sum_held_at_any_instant(holds):
    # (taken at, held for, weight): held over [taken, back); what comes back at t is free at t
    taken = np.array([h[0] for h in holds], np.int64)
    back = taken + np.array([h[1] for h in holds], np.int64)
    weights = np.array([h[2] for h in holds], np.int64)
    expected = max([0] + [int(weights[(taken <= t) & (back > t)].sum()) for t in taken])
    assert sim.SimResult._peak(taken, back, weights) == expected
