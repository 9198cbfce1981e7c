"""The validation table: pcie-bench's published DMA engine and calibrate's sweeps, predicted."""
import pytest

from gpuwrite.model import pcie, validation
from gpuwrite.model.params import Params


def test_pcie_bench_latency_is_predicted_within_the_goal_with_one_parameter_set():
    rows = [r for r in validation.pcie_bench_rows() if r["quantity"] == "DMA read latency"]
    assert len(rows) == 18
    counted = [r for r in rows if r["within_goal"] is not None]
    assert len(counted) >= 12 and all(r["within_goal"] for r in counted)
    # the remote socket's reads at 2048 B were not fitted: the socket penalty is a prediction there
    remote = next(r for r in rows if r["machine"].endswith("remote socket's memory") and r["size_bytes"] == 2048)
    assert remote["kind"] == "prediction" and abs(remote["error_pct"]) < 1.0


def test_pcie_bench_bandwidth_misses_are_reported_not_hidden():
    rows = [r for r in validation.pcie_bench_rows() if r["quantity"] == "DMA read bandwidth"]
    misses = [(r["machine"], r["size_bytes"]) for r in rows if r["within_goal"] is False]
    assert ("NFP6000, local memory", 256) in misses
    assert all(r["within_goal"] for r in rows if r["size_bytes"] >= 512)
    assert "misses: NFP6000, local memory DMA read bandwidth at 256 B" in validation.summary(
        validation.table())


def test_calibrate_sweeps_are_predicted_by_littles_law_until_the_link():
    params = Params()
    round_trip_ns = 2 * (2 * 20.0 + 150.0 + 200.0) + 100.0 + params.gpu.read_issue_ns
    sweeps = {"host_loads_vs_outstanding": [{"outstanding": 1, "loads_per_us": 1.0},
                                            {"outstanding": 4096, "loads_per_us": 1.0}],
              "host_read_latency_vs_size": [{"size_bytes": 4096, "latency_us": 1.0}],
              "copy_engine_vs_size": [{"direction": "h2d", "size_bytes": 1 << 20, "gbytes_per_s": 1.0}]}
    rows = validation._sweep_rows(sweeps, params, "test", "machine")
    assert rows[0]["model"] == pytest.approx(1e3 / round_trip_ns)
    assert rows[1]["model"] == pytest.approx(pcie.effective_rate_gbps(params.link, "read", 128) * 1e3 / 1024)
    assert rows[2]["model"] == pytest.approx(round_trip_ns + 4096 * 8 / pcie.effective_rate_gbps(params.link, "read", 4096))
    assert rows[3]["model"] == pytest.approx(pcie.effective_rate_gbps(params.link, "read", 1 << 20) / 8)
