"""The fast core and the SimPy reference give the same per-message times."""
import numpy as np
import pytest

from gpuwrite.model import sim
from gpuwrite.model.params import PATHS, Params, Workload
from gpuwrite.model.simpy_ref import run_simpy, simulate_simpy

STRAINED = {"network": {"vl_buffer_bytes": 32768},
            "receiver": {"stall_period_ns": 15000.0, "stall_duration_ns": 5000.0},
            "nic": {"staging_buffer_bytes": 49152, "bounce_chunk_bytes": 4096}}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("topology", ["same_switch", "across_sockets"])
def test_identical_per_message_latencies_closed_loop(path, topology):
    params = Params(path=path, topology=topology).updated(STRAINED)
    sizes = (8, 100, 220) if path == "gpu_push_inline" else (64, 1024, 4096, 16384)
    in_flight = 16 if path == "gpu_push_inline" else 6   # small inline messages need more to queue
    workload = Workload(n_messages=1500, n_qps=4 * in_flight // 6 + 1, outstanding=in_flight,
                        size_kind="choice", sizes_bytes=sizes)
    inputs = sim.prepare(params, workload, seed=9)
    fast, reference = sim.run_fast(inputs), run_simpy(inputs)
    for key in fast:
        assert np.array_equal(fast[key], reference[key]), key
    fast_latency = sim.SimResult(params, workload, 9, inputs, fast).messages["latency_ns"]
    assert fast_latency.max() > 2 * fast_latency.min()  # queues really formed


def test_identical_with_drops_open_loop():
    params = Params().updated(STRAINED).updated({"nic": {"policy": "drop"}})
    workload = Workload(n_messages=1500, arrival="open", interval_ns=40.0, size_kind="choice",
                        sizes_bytes=(64, 4096, 16384))
    fast = sim.simulate(params, workload, 4)
    reference = simpy_result = simulate_simpy(params, workload, 4)
    assert fast.summary["dropped"] > 0
    for key in fast.raw:
        assert np.array_equal(fast.raw[key], reference.raw[key]), key
    assert simpy_result.summary["dropped"] == fast.summary["dropped"]


def test_identical_with_drops_closed_loop():
    # completions come out of order when messages are dropped; both must issue the next
    # messages from the earliest completions
    params = Params().updated(STRAINED).updated({"nic": {"policy": "drop"}})
    workload = Workload(n_messages=1500, n_qps=3, outstanding=12, size_kind="choice", sizes_bytes=(64, 4096, 16384))
    inputs = sim.prepare(params, workload, seed=6)
    fast, reference = sim.run_fast(inputs), run_simpy(inputs)
    assert fast["dropped"].sum() > 0
    for key in fast:
        assert np.array_equal(fast[key], reference[key]), key


@pytest.mark.parametrize("scheduler", ["fifo", "round_robin"])
def test_a_completion_at_the_same_time_as_a_first_issue_goes_after_it(scheduler):
    # Two QPs, one message each in flight: QP 1's first message is issued exactly when
    # message 0 (QP 0) completes. The first issue has the smaller issue number, so it is
    # message 1 and QP 0's next message is message 2, in both simulators.
    params = Params().updated({"nic": {"scheduler": scheduler}})
    alone = sim.simulate(params, Workload(n_messages=1, size_bytes=4096), 0)
    done_ps = int(alone.raw["done"][0])
    workload = Workload(n_messages=6, n_qps=2, outstanding=1, size_bytes=4096, issue_gap_ns=done_ps / 1000)
    inputs = sim.prepare(params, workload, seed=0)
    fast, reference = sim.run_fast(inputs), run_simpy(inputs)
    assert fast["arrival"][1] == fast["done"][0] == done_ps      # the tie happened
    assert list(fast["qp"][:3]) == [0, 1, 0]
    for key in fast:
        assert np.array_equal(fast[key], reference[key]), key


def test_identical_when_pushes_are_forwarded_after_the_doorbell():
    params = Params(path="gpu_push", topology="across_sockets").updated(
        {**STRAINED, "nic": {**STRAINED["nic"], "push_forwarding": "after_doorbell"}})
    workload = Workload(n_messages=1200, n_qps=5, outstanding=6, size_kind="choice",
                        sizes_bytes=(64, 4096, 16384, 40000))
    inputs = sim.prepare(params, workload, seed=4)
    fast, reference = sim.run_fast(inputs), run_simpy(inputs)
    for key in fast:
        assert np.array_equal(fast[key], reference[key]), key
