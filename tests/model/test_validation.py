"""The validation table: pcie-bench's published DMA engine and calibrate's sweeps, predicted."""
from pathlib import Path

import pytest

from gpuwrite.model import pcie, requester, validation
from gpuwrite.model.params import Params

# The checkout's files (an installed gpuwrite has no experiments/ beside it).
CALIBRATION = Path(__file__).resolve().parents[2] / "experiments" / "calibration"


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
    # 256 B and more: within the goal on both sockets (the engine's time per DMA, fitted at 129 and 192 B)
    assert all(r["within_goal"] for r in rows if r["size_bytes"] >= 256)
    assert sum(r["within_goal"] is True for r in rows) == 2 * 8     # 256, 257, 320, 384, 511 B to 2 KiB
    # below 129 B the line misses both ways; those rows stay in the table with their errors
    small = {r["size_bytes"]: r for r in rows if r["machine"] == "NFP6000, local memory" and r["size_bytes"] < 129}
    assert small[63]["error_pct"] > 10 and small[64]["error_pct"] < -10 and small[64]["within_goal"] is None
    assert "NFP6000" not in validation.summary(validation.table())


def test_calibrate_sweeps_are_predicted_by_the_requester_closed_forms():
    params = Params()
    round_trip_ns = 2 * (2 * 20.0 + 150.0 + 200.0) + 100.0 + params.gpu.read_issue_ns
    # 32 chains, one warp: its steps took round trip + 100 ns x (H_32 - 1): jitter 100 ns
    step_ns = round_trip_ns + 100.0 * (requester.harmonic(32) - 1)
    # 4096 in flight at 90 % of the 768 tags per round trip: the completer's service time
    plateau_per_us = 0.9 * 768e3 / round_trip_ns
    sweeps = {"host_loads_vs_outstanding": [{"outstanding": 1, "loads_per_us": 1.0},
                                            {"outstanding": 32, "loads_per_us": 32e3 / step_ns},
                                            {"outstanding": 4096, "loads_per_us": plateau_per_us}],
              "warp_read_vs_size": [{"size_bytes": 4096, "lines_in_flight": 8, "latency_us": 1.0}],
              "copy_queued_vs_size": [{"direction": "h2d", "size_bytes": 4096, "gbytes_per_s": 0.5},
                                      {"direction": "h2d", "size_bytes": 1 << 20, "gbytes_per_s": 1.0}]}
    rows = validation._sweep_rows(sweeps, params, "test", "machine")
    assert rows[0]["model"] == pytest.approx(1e3 / round_trip_ns)
    assert rows[1]["kind"] == "fitted" and rows[1]["error_pct"] == pytest.approx(0.0, abs=1e-9)
    # the largest point defines gpu.read_service_ns and is reproduced exactly
    assert rows[2]["kind"] == "fitted" and "defines gpu.read_service_ns" in rows[2]["note"]
    assert rows[2]["error_pct"] == pytest.approx(0.0, abs=1e-9)
    # 32 lines, 8 at a time: four groups, each the slowest of 8 reads, then 1 KiB at the link's rate
    assert rows[3]["model"] == pytest.approx(4 * (round_trip_ns + 100.0 * (requester.harmonic(8) - 1)
                                                  + 1024 * 8 / pcie.effective_rate_gbps(params.link, "read", 128)))
    setup_ns = 4096 / 0.5 - 4096 * 8 / pcie.effective_rate_gbps(params.link, "read", 4096)
    assert rows[4]["kind"] == "fitted" and rows[5]["kind"] == "prediction"
    assert rows[5]["model"] == pytest.approx((1 << 20) / (setup_ns + (1 << 20) * 8 / pcie.effective_rate_gbps(
        params.link, "read", 1 << 20)))


def test_the_busy_h100_run_reaches_the_completers_plateau():
    rows = [r for r in validation.calibration_rows(CALIBRATION / "nvidia-h100-80gb-hbm3-2026-11-23-c.toml")
            if r["quantity"].startswith("host loads in flight")]
    by_count = {int(r["quantity"].split(": ")[1]): r for r in rows}
    assert by_count[4096]["kind"] == "fitted" and "defines gpu.read_service_ns" in by_count[4096]["note"]
    assert abs(by_count[2048]["error_pct"]) < 2.0        # on the plateau, predicted
    # before it, the model lacks the growth this busy machine showed, and says so
    assert all("lacks" in by_count[n]["note"] for n in (256, 512, 1024) if not by_count[n]["within_goal"])


def test_first_kernels_sweeps_stay_in_the_table_with_what_the_model_lacks():
    h100 = CALIBRATION / "nvidia-h100-80gb-hbm3-2026-11-23.toml"
    rows = validation.calibration_rows(h100)
    first = [r for r in rows if r["quantity"] == "one warp reads host memory (first kernel)"]
    assert len(first) == 5 and all("lacks" in r["note"] for r in first)
    synchronous = [r for r in rows if "synchronous copy" in r["quantity"]]
    assert sorted(r["size_bytes"] for r in synchronous if r["kind"] == "fitted") == [4096, 4096]
    assert all("host's issue" in r["note"] for r in synchronous if r["kind"] == "prediction")
    # every miss says what the model lacks, with this run's own numbers
    misses = [r for r in rows if r["within_goal"] is False]
    assert misses and all("lacks" in r["note"] for r in misses)
    h2d_64k = next(r for r in synchronous if r["quantity"].startswith("copy engine h2d") and r["size_bytes"] == 65536)
    assert "88.2 us a copy here against 147.0 us for the fitted 4096 B copy" in h2d_64k["note"]
    one_kib = next(r for r in first if r["size_bytes"] == 1024)
    assert "8 lines took 1.2 round trips here, the PTX schedule 2.2" in one_kib["note"]


def test_the_h100_run_with_the_new_kernels_is_predicted_within_the_goal():
    h100 = CALIBRATION / "nvidia-h100-80gb-hbm3-2026-11-23-b.toml"
    rows = [r for r in validation.calibration_rows(h100) if r["within_goal"] is not None]
    assert [r["quantity"] for r in rows if not r["within_goal"]] == []
    assert sum("8 lines in flight" in r["quantity"] for r in rows) == 5
    assert sum("queued copies" in r["quantity"] for r in rows) == 6     # 8 points, one fitted per direction
