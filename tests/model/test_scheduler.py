"""The per-QP round-robin scheduler: reference equality, fairness, and agreement with fifo."""
import numpy as np
import pytest

from gpuwrite.model import sim
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import Params, Workload
from gpuwrite.model.simpy_ref import run_simpy

STARVED = {"network": {"vl_buffer_bytes": 32768}, "nic": {"staging_buffer_bytes": 65536},
           "receiver": {"stall_period_ns": 20000.0, "stall_duration_ns": 5000.0}}


def round_robin(policy="hold", path="gpu_push"):
    return Params(path=path).updated(STARVED).updated({"nic": {"scheduler": "round_robin", "policy": policy}})


@pytest.mark.parametrize("arrival", ["open", "closed"])
def test_round_robin_matches_the_simpy_reference(arrival):
    workload = Workload(n_messages=1500, n_qps=3, outstanding=8, arrival=arrival, interval_ns=40.0,
                        qp_weights=(8, 1, 1) if arrival == "open" else (), size_kind="choice",
                        sizes_bytes=(64, 4096, 16384))
    inputs = sim.prepare(round_robin(), workload, seed=2)
    fast, reference = sim.run_fast(inputs), run_simpy(inputs)
    for key in fast:
        assert np.array_equal(fast[key], reference[key]), key
    # packets of different QPs' messages interleave on the link
    order = np.argsort(fast["p_tx_start"], kind="stable")
    messages_in_sending_order = np.repeat(np.arange(len(inputs.sizes)), inputs.count_u[inputs.size_index])[order]
    assert (np.diff(messages_in_sending_order) < 0).any()


def test_round_robin_inline_matches_the_reference():
    workload = Workload(n_messages=1500, n_qps=4, outstanding=16, size_kind="uniform", min_bytes=0, max_bytes=220)
    inputs = sim.prepare(round_robin(path="gpu_push_inline"), workload, seed=3)
    fast, reference = sim.run_fast(inputs), run_simpy(inputs)
    for key in fast:
        assert np.array_equal(fast[key], reference[key]), key


def test_round_robin_protects_a_light_qp_from_a_heavy_one():
    # 90 % of the traffic on QP 0, load just under what the stalling receiver drains, and a
    # staging buffer large enough that the queue forms in the NIC, where the scheduler acts
    params = round_robin().updated({"nic": {"staging_buffer_bytes": 1 << 20}})
    workload = Workload(n_messages=6000, n_qps=2, arrival="open", interval_ns=150.0, qp_weights=(9, 1),
                        size_kind="fixed", size_bytes=4096)
    fair = sim.simulate(params, workload, 1).messages
    fifo = sim.simulate(params.updated({"nic": {"scheduler": "fifo"}}), workload, 1).messages
    light_fair = fair.loc[fair["qp"] == 1, "latency_ns"].median()
    light_fifo = fifo.loc[fifo["qp"] == 1, "latency_ns"].median()
    heavy_fair = fair.loc[fair["qp"] == 0, "latency_ns"].median()
    assert light_fair < 0.5 * light_fifo
    assert heavy_fair > light_fair
    # the link never carries two messages at once, in any order of service
    order = fair.sort_values("tx_start_ns")
    assert (order["tx_start_ns"].to_numpy()[1:] >= order["tx_end_ns"].to_numpy()[:-1]).all()


def test_one_qp_round_robin_sends_exactly_like_fifo():
    workload = Workload(n_messages=2000, n_qps=1, outstanding=16, size_kind="choice", sizes_bytes=(64, 4096, 16384))
    fifo = sim.simulate(round_robin().updated({"nic": {"scheduler": "fifo"}}), workload, 5).raw
    fair = sim.simulate(round_robin(), workload, 5).raw
    for key in fifo:
        assert np.array_equal(fifo[key], fair[key]), key


def test_round_robin_is_only_for_push_paths_with_hold():
    with pytest.raises(ParamError, match=r"nic.scheduler='round_robin'.*fifo on nic_pull"):
        Params(path="nic_pull").updated({"nic": {"scheduler": "round_robin"}})
    with pytest.raises(ParamError, match=r"nic.scheduler='round_robin'.*fifo with nic.policy drop"):
        Params().updated({"nic": {"scheduler": "round_robin", "policy": "drop"}})
    with pytest.raises(ParamError, match="workload.qp_weights"):
        Workload(n_qps=2, qp_weights=(1.0,))


def test_link_utilisation_is_a_fraction_when_sending_out_of_order():
    workload = Workload(n_messages=3000, n_qps=2, arrival="open", interval_ns=150.0, qp_weights=(9, 1),
                        size_kind="choice", sizes_bytes=(64, 4096), samples=300)
    result = sim.simulate(round_robin().updated({"nic": {"staging_buffer_bytes": 1 << 20}}), workload, 1)
    utilisation = result.timeseries()["link_utilisation"]
    assert utilisation.between(0.0, 1.0 + 1e-9).all()
    busy_ns = (result.messages["tx_end_ns"] - result.messages["tx_start_ns"]).sum()
    span_ns = result.timeseries()["time_ns"].iloc[-1]
    step_ns = span_ns / 300
    assert utilisation.sum() * step_ns == pytest.approx(busy_ns, rel=1e-3)
