"""The read engine's time per request: issue cost, or fixed + bytes x per byte (NFP6000)."""
import numpy as np
import pytest

from gpuwrite.model import pcie, sim, validation
from gpuwrite.model import paths
from gpuwrite.model.nic import NicParams
from gpuwrite.model.params import Params, Workload
from gpuwrite.model.simpy_ref import run_simpy

NFP_ENGINE = {"read_request_overhead_ns": 0.0, "read_engine_fixed_ns": 12.17, "read_engine_per_byte_ns": 0.11695}


def test_time_per_request_is_the_larger_of_issue_cost_and_fixed_plus_bytes():
    nfp = NicParams(**NFP_ENGINE)
    # by hand: 12.17 + 256 x 0.11695 = 12.17 + 29.9392
    assert paths.read_request_ns(nfp, 256) == pytest.approx(42.1092, abs=1e-9)
    slow_issue = NicParams(**{**NFP_ENGINE, "read_request_overhead_ns": 50.0})
    assert paths.read_request_ns(slow_issue, 256) == 50.0
    assert paths.read_request_ns(slow_issue, 512) == pytest.approx(12.17 + 512 * 0.11695)


def test_the_defaults_keep_the_issue_cost_alone():
    # every machine but the NFP: no per-byte cost, so the engine is what it was before
    params = Params(path="nic_pull", topology="across_sockets")
    for size in (64, 256, 511, 4096):
        assert paths.read_request_ns(params.nic, size) == params.nic.read_request_overhead_ns == 4.0
    topology = params.build_topology()
    gpu, nic = params.endpoints(topology)
    route, target = topology.route(nic, gpu), topology.node(gpu)
    round_trip_ns = 2 * route.one_way_latency_ns + target.latency_ns
    for size in (64, 300, 4096, 65536):
        request_bytes = size / len(pcie.read_request_sizes(params.link, size))
        _, link_gbps = route.narrowest("read", size)
        expected = min(link_gbps, params.nic.read_outstanding * request_bytes * 8 / round_trip_ns,
                       request_bytes * 8 / 4.0)
        assert paths.read_engine_gbps(route, target, size, params) == pytest.approx(expected, rel=1e-12)


def test_the_nfp_256_byte_bandwidth_is_the_closed_form():
    rows = {(r["machine"], r["size_bytes"]): r for r in validation.pcie_bench_rows()
            if r["quantity"] == "DMA read bandwidth"}
    # the engine binds at 256 B (link 53.7 Gb/s): 256 x 8 / 42.1092 ns
    for machine in ("NFP6000, local memory", "NFP6000, remote socket's memory"):
        row = rows[(machine, 256)]
        assert row["model"] == pytest.approx(2048 / 42.1092, rel=1e-6)
        assert row["kind"] == "prediction" and row["within_goal"] is True
    # the two points the line goes through are marked fitted and met
    for size in validation.FITTED_BANDWIDTH_BYTES:
        row = rows[("NFP6000, local memory", size)]
        assert row["kind"] == "fitted" and abs(row["error_pct"]) < 0.05


def test_the_fast_core_and_simpy_agree_with_the_per_byte_engine_cost():
    params = Params(path="nic_pull", topology="across_sockets").updated({"nic": NFP_ENGINE})
    workload = Workload(n_messages=600, n_qps=2, outstanding=8, size_kind="choice", sizes_bytes=(129, 256, 2048))
    inputs = sim.prepare(params, workload, seed=3)
    fast, reference = sim.run_fast(inputs), run_simpy(inputs)
    for key in fast:
        assert np.array_equal(fast[key], reference[key]), key
    # the cost reaches the simulated messages: without it they finish earlier
    plain = sim.run_fast(sim.prepare(Params(path="nic_pull", topology="across_sockets"), workload, seed=3))
    assert fast["done"].max() > plain["done"].max()
