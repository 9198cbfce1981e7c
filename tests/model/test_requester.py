"""Closed forms of the GPU as a PCIe requester (gpuwrite/model/requester.py), by hand."""
import math

import pytest

from gpuwrite.model import pcie, requester
from gpuwrite.model.errors import ParamError

LINK = pcie.LinkConfig()


def test_a_warp_waits_for_its_slowest_lane():
    # H_4 = 1 + 1/2 + 1/3 + 1/4 = 25/12: the slowest of 4 is 13/12 scales past the mean
    assert requester.slowest_lane_ns(1000.0, 60.0, 4) == pytest.approx(1000.0 + 60.0 * 13 / 12)
    assert requester.slowest_lane_ns(1000.0, 60.0, 1) == pytest.approx(1000.0)
    # the expected maximum of exponentials, against a sample
    import numpy as np
    rng = np.random.default_rng(1)
    samples = 1000.0 - 60.0 + rng.exponential(60.0, size=(20000, 32)).max(axis=1)
    assert samples.mean() == pytest.approx(requester.slowest_lane_ns(1000.0, 60.0, 32), rel=2e-3)
    assert requester.jitter_from_lanes(4, 1065.0, 1000.0) == pytest.approx(60.0)
    with pytest.raises(ParamError, match="lanes"):
        requester.jitter_from_lanes(1, 1000.0, 1000.0)


def test_chains_follow_littles_law_per_warp_step_until_the_tags_or_the_link():
    # 64 chains = two full warps: each step is the slowest of 32 lanes
    step_ns = 1000.0 + 50.0 * (requester.harmonic(32) - 1)
    assert requester.chains_loads_per_us(64, 1000.0, 50.0, LINK, 768) == pytest.approx(64e3 / step_ns)
    # 1024 chains, 768 tags each held one round trip: 768 reads per us
    assert requester.chains_loads_per_us(1024, 1000.0, 50.0, LINK, 768) == pytest.approx(768.0)
    sector_per_us = pcie.effective_rate_gbps(LINK, "read", 32) * 1e3 / 256
    assert requester.chains_loads_per_us(1 << 20, 1000.0, 50.0, LINK, 1 << 20) == pytest.approx(sector_per_us)


def test_a_warp_read_pays_the_slowest_read_of_each_group_of_lines():
    rate = pcie.effective_rate_gbps(LINK, "read", 128)
    h8, h2, h4 = 1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 6 + 1 / 7 + 1 / 8, 1.5, 25 / 12
    # 64 KiB = 512 lines, 8 in flight: 64 groups, each its slowest of 8 reads
    assert requester.warp_read_ns(65536, 8, 1000.0, 50.0, LINK) == pytest.approx(
        64 * (1000.0 + 50.0 * (h8 - 1) + 1024 * 8 / rate))
    # 256 B = 2 lines: one group of 2; 10 lines, 8 in flight: a group of 8, then one of 2
    group2 = 1000.0 + 50.0 * (h2 - 1) + 256 * 8 / rate
    assert requester.warp_read_ns(256, 8, 1000.0, 50.0, LINK) == pytest.approx(group2)
    assert requester.warp_read_ns(1280, 8, 1000.0, 50.0, LINK) == pytest.approx(
        1000.0 + 50.0 * (h8 - 1) + 1024 * 8 / rate + group2)
    # the first kernel, unrolled by 4: 6 lines = 2 alone, then one group of 4
    single = 1000.0 + 128 * 8 / rate
    assert requester.unrolled_loop_read_ns(768, 4, 1000.0, 50.0, LINK) == pytest.approx(
        2 * single + 1000.0 + 50.0 * (h4 - 1) + 512 * 8 / rate)


def test_a_copy_is_its_setup_then_its_bytes():
    rate = requester.copy_rate_gbps(LINK, "d2h", 1 << 20)
    assert rate == pcie.effective_rate_gbps(LINK, "write", 1 << 20)
    setup = requester.copy_setup_from_point(4096, 4096 / 3000.0, requester.copy_rate_gbps(LINK, "d2h", 4096))
    assert setup == pytest.approx(3000.0 - 4096 * 8 / requester.copy_rate_gbps(LINK, "d2h", 4096))
    fits = requester.fit_copy_setups([{"direction": "d2h", "size_bytes": 1 << 20, "gbytes_per_s": 9.0},
                                      {"direction": "d2h", "size_bytes": 4096, "gbytes_per_s": 4096 / 3000.0}], LINK)
    assert fits == {"d2h": (pytest.approx(setup), 4096)}
    assert requester.copy_ns(1 << 20, setup, rate) == pytest.approx(setup + (1 << 20) * 8 / rate)
    with pytest.raises(ParamError, match="h2d or d2h"):
        requester.copy_rate_gbps(LINK, "p2p", 4096)


def test_jitter_is_fitted_at_the_largest_point_of_one_warp():
    points = [{"outstanding": n, "loads_per_us": n * 1e3 / (1000.0 + 10.0 * (requester.harmonic(min(n, 32)) - 1))}
              for n in (1, 4, 16, 64)]
    jitter_ns, used = requester.fit_read_jitter(points, 1000.0)
    assert used == 16 and jitter_ns == pytest.approx(10.0)
    assert requester.fit_read_jitter(points[:1], 1000.0) is None
    assert math.isclose(requester.harmonic(1), 1.0)


def test_read_tags_must_be_a_positive_integer():
    from gpuwrite.model.params import Params

    with pytest.raises(ParamError, match="gpu.read_tags"):
        Params().updated({"gpu": {"read_tags": 0}})
    assert Params().updated({"gpu": {"read_tags": 256}}).gpu.read_tags == 256


def test_warps_queue_at_the_completer_mean_value_analysis_by_hand():
    step_ns, service_ns = 1000.0, 2.0
    # no completer, or one warp: Little's law, outstanding / step
    assert requester.completer_loads_per_us(96, step_ns, 0.0) == pytest.approx(96e3 / step_ns)
    assert requester.completer_loads_per_us(32, step_ns, service_ns) == pytest.approx(32e3 / step_ns)
    assert requester.completer_loads_per_us(20, step_ns, service_ns) == pytest.approx(20e3 / step_ns)
    # two warps of 32: demand 64 ns, delay 936 ns; the second warp finds the first's queue
    demand, delay = 32 * service_ns, step_ns - 32 * service_ns
    queue_one = demand / (delay + demand)
    steps_per_ns = 2 / (delay + demand * (1 + queue_one))
    assert requester.completer_loads_per_us(64, step_ns, service_ns) == pytest.approx(32e3 * steps_per_ns)
    with pytest.raises(ParamError, match="service_ns"):
        requester.completer_loads_per_us(64, step_ns, -1.0)


def test_loads_approach_the_completers_plateau_from_below():
    step_ns, service_ns = 1400.0, 1.9
    plateau_per_us = 1e3 / service_ns
    counts = [32 * 2 ** k for k in range(9)]
    rates = [requester.completer_loads_per_us(n, step_ns, service_ns) for n in counts]
    assert rates == sorted(rates)
    for n, rate in zip(counts, rates):
        # under both asymptotes: Little's law without the queue, and the completer's rate
        assert rate < min(n * 1e3 / step_ns, plateau_per_us) or n == 32
    assert rates[-1] == pytest.approx(plateau_per_us, rel=0.01)
    # the queue makes the round trip grow: half way to the plateau a step is slower than alone
    assert counts[3] * 1e3 / rates[3] > step_ns * 1.01
    # the requester's tags still cap the rate
    assert requester.chains_loads_per_us(8192, 1000.0, 0.0, LINK, 768, service_ns=0.5) == pytest.approx(768.0)


def test_the_service_time_is_fitted_at_the_largest_point_and_reproduces_it():
    round_trip_ns, jitter_ns = 1200.0, 80.0
    step_ns = requester.slowest_lane_ns(round_trip_ns, jitter_ns, 32)
    points = [{"outstanding": 32, "loads_per_us": 32e3 / step_ns}, {"outstanding": 1024, "loads_per_us": 500.0},
              {"outstanding": 4096, "loads_per_us": 520.0}, {"outstanding": 64, "loads_per_us": 40.0}]
    service_ns, used = requester.fit_read_service(points, round_trip_ns, jitter_ns)
    assert used == 4096 and 1e3 / 520.0 * 0.9 < service_ns < 1e3 / 520.0
    assert requester.completer_loads_per_us(4096, step_ns, service_ns) == pytest.approx(520.0, rel=1e-12)
    # no point beyond one warp: nothing to fit; a point as fast as Little's law: no queue
    assert requester.fit_read_service(points[:1], round_trip_ns, jitter_ns) is None
    assert requester.fit_read_service([{"outstanding": 64, "loads_per_us": 1e9}], round_trip_ns, jitter_ns) == (0.0, 64)


def test_read_service_must_be_a_number_of_at_least_zero():
    from gpuwrite.model.params import Params

    with pytest.raises(ParamError, match="gpu.read_service_ns"):
        Params().updated({"gpu": {"read_service_ns": -1.0}})
    assert Params().gpu.read_service_ns == 0.0 and "assumption" in Params().sources()["gpu.read_service_ns"]
