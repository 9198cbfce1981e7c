"""Parameters at the edges of what is legal: each either gives the number its mechanism
says or is refused with a ParamError naming the value (found by an adversarial audit:
each case hung, crashed or printed a wrong number before)."""
import numpy as np
import pytest

from gpuwrite.model import buffer, paths, sim
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import Params, Workload


def test_a_stall_that_leaves_no_picosecond_to_drain_is_refused():
    # 1.0004 ns and 0.9996 ns are both 1000 ps on the simulator's clock: the receiver
    # would stall for the whole period and the simulator looped for ever
    with pytest.raises(ParamError, match=r"receiver.stall_duration_ns=0.9996.*picosecond"):
        Params().updated({"receiver": {"stall_period_ns": 1.0004, "stall_duration_ns": 0.9996}})
    with pytest.raises(ParamError, match=r"receiver.stall_duration_ns"):
        Params().updated({"receiver": {"stall_period_ns": 0.0004, "stall_duration_ns": 0.0003}})
    # one picosecond of drain per period is legal, and drains at that duty cycle
    params = Params().updated({"receiver": {"stall_period_ns": 1.0, "stall_duration_ns": 0.999}})
    row = sim.simulate(params, Workload(n_messages=1, size_bytes=64), 0).messages.iloc[0]
    drain_ns = (64 + params.network.header_bytes) * 8.0 / params.receiver.drain_rate_gbps
    assert row["drain_end_ns"] - row["received_ns"] == pytest.approx(drain_ns * 1000, rel=0.01)


def test_an_inline_message_longer_than_the_mtu_is_refused():
    # it was one WQE of staging but four packets of wire: the analytic wire step counted
    # one packet and the simulator's packet tables went out of step (IndexError)
    with pytest.raises(ParamError, match=r"nic.inline_max_bytes=1000.*network.mtu_bytes \(256\)"):
        Params(path="gpu_push_inline").updated({"nic": {"inline_max_bytes": 1000}, "network": {"mtu_bytes": 256}})
    params = Params(path="gpu_push_inline").updated({"nic": {"inline_max_bytes": 256}, "network": {"mtu_bytes": 256}})
    timing = paths.path_timing("gpu_push_inline", params.build_topology(), 256, params)
    assert len(timing.packet_wire_ns) == len(timing.packet_staging_bytes) == 1


def test_an_empty_packet_without_headers_takes_no_credits_and_no_time_on_the_credit_loop():
    # network.header_bytes = 0 and an empty message: a packet of 0 credits (it divided by 0)
    params = Params().updated({"network": {"header_bytes": 0}})
    times = paths.resource_times_ns(paths.path_timing("gpu_push", params.build_topology(), 0, params), params)
    assert times["credits"] == 0.0
    assert paths.throughput_gbps("gpu_push", "same_switch", 0, params) == 0.0
    latency = sim.simulate(params, Workload(n_messages=1, size_bytes=0), 0).messages["latency_ns"].iloc[0]
    assert latency == pytest.approx(paths.latency_ns("gpu_push", "same_switch", 0, params), abs=0.01)


def test_the_buffer_closed_form_refuses_an_empty_message():
    # no payload, no line rate to take a share of (it divided by 0)
    with pytest.raises(ParamError, match=r"size_bytes=0.*>= 1"):
        buffer.need(Params(), 0.5, 0)


@pytest.mark.parametrize("overrides", [
    {"network": {"propagation_ns": 1e16}},                 # ps past int64: latency came out 584 ns
    {"gpu": {"write_issue_ns": 1e16}},
    {"network": {"credit_update_delay_ns": 1e17}},         # throughput came out 141 Gb/s, not ~0
    {"receiver": {"stall_period_ns": 1e17, "stall_duration_ns": 5e16}},   # the stalls vanished
])
def test_a_run_past_the_simulators_clock_is_refused(overrides):
    with pytest.raises(ParamError, match=r"simulated time.*2\*\*62 ps"):
        sim.simulate(Params().updated(overrides), Workload(n_messages=4, size_bytes=4096), 0)


def test_open_arrivals_past_the_simulators_clock_are_refused():
    workload = Workload(n_messages=1000, size_bytes=64, arrival="open", process="periodic", interval_ns=1e13)
    with pytest.raises(ParamError, match=r"workload.interval_ns=10000000000000.0.*1,000 messages"):
        sim.simulate(Params(), workload, 0)


def test_only_the_stall_offset_within_a_period_matters():
    # an offset of 1e17 ns is past the clock in ps; the windows repeat, so it is 1e17 mod period
    base = {"stall_period_ns": 3000.0, "stall_duration_ns": 1000.0}
    far = Params().updated({"receiver": {**base, "stall_offset_ns": 1e17}})
    near = Params().updated({"receiver": {**base, "stall_offset_ns": 1e17 % 3000.0}})
    workload = Workload(n_messages=200, size_bytes=4096)
    assert np.array_equal(sim.simulate(far, workload, 0).raw["done"], sim.simulate(near, workload, 0).raw["done"])


def test_a_pushed_packet_is_ready_only_once_the_slot_header_and_its_payload_are_in():
    # 257 B at a 1 Gb/s store rate, MTU 256: one 16 B slot header + 257 B cross PCIe in
    # 2184 ns; the first packet needs header + 256 B, 2176 ns, the second 1 B more. The
    # shares assumed a header per packet (272 + 17 of 273 B): the first packet was ready
    # at 2055.5 ns, before its bytes were in, and 257 B came out faster than 256 B
    params = Params().updated({"gpu": {"store_rate_gbps": 1.0},
                               "network": {"mtu_bytes": 256, "rate_gbps": 1.0, "header_bytes": 0},
                               "receiver": {"drain_rate_gbps": 1.0}})
    timing = paths.path_timing("gpu_push", params.build_topology(), 257, params)
    assert timing.packet_ingress_ns == pytest.approx((2176.0, 8.0))
    assert paths.latency_ns("gpu_push", "same_switch", 257, params) > paths.latency_ns(
        "gpu_push", "same_switch", 256, params)


def test_the_simpy_reference_takes_packets_of_no_credits():
    # network.header_bytes = 0, empty messages: SimPy's containers refuse an amount of 0
    from gpuwrite.model.simpy_ref import run_simpy

    for scheduler in ("fifo", "round_robin"):
        params = Params().updated({"network": {"header_bytes": 0}, "nic": {"scheduler": scheduler}})
        inputs = sim.prepare(params, Workload(n_messages=6, size_kind="choice", sizes_bytes=(0, 64), n_qps=2), 0)
        assert inputs.pkt_credits.min() == 0
        fast, reference = sim.run_fast(inputs), run_simpy(inputs)
        for key in fast:
            assert np.array_equal(fast[key], reference[key]), key


@pytest.mark.parametrize("nic", [{"policy": "hold", "scheduler": "fifo"}, {"policy": "drop", "scheduler": "fifo"},
                                 {"policy": "hold", "scheduler": "round_robin"}], ids=["fifo", "drop", "round_robin"])
def test_a_completion_issues_no_message_once_every_message_is_issued(nic):
    # closed loop, 3 messages, all of them first issues 2 us apart; each completes in
    # under 1 us, which issued a message that did not exist: message 1 started at the
    # first completion instead of at 2 us (the SimPy reference issued it at 2 us)
    from gpuwrite.model.simpy_ref import run_simpy

    params = Params().updated({"nic": nic})
    workload = Workload(n_messages=3, size_bytes=64, n_qps=1, outstanding=4, issue_gap_ns=2000.0)
    inputs = sim.prepare(params, workload, 0)
    fast = sim.run_fast(inputs)
    assert fast["arrival"].tolist() == [0, 2_000_000, 4_000_000]
    assert np.array_equal(fast["done"], run_simpy(inputs)["done"])


@pytest.mark.parametrize("size, mtu, stalls", [
    (4097, 4096, {"stall_period_ns": 50_000.0, "stall_duration_ns": 5_000.0}),   # waited 116 us
    (4097, 1024, {}),                                                            # waited 1.9 us
    (1000, 256, {"stall_period_ns": 50_000.0, "stall_duration_ns": 15_000.0}),  # waited 0.37 us
])
def test_the_buffer_closed_form_sustains_its_share_when_packets_are_uneven(size, mtu, stalls):
    # the closed form rounded payload to whole full packets (a 4097 B message is a 4112 B
    # and a 17 B staged packet), held every packet of a message for its average share of
    # the ingress and the wire (later packets wait behind earlier ones), and let the VL
    # buffer absorb payload per wire byte where it holds whole 64 B credit blocks
    params = Params(topology="across_root_ports" if mtu < 4096 else "same_switch").updated(
        {"network": {"mtu_bytes": mtu, "vl_buffer_bytes": 65536 if stalls.get("stall_duration_ns") == 15_000.0
                     else 262144},
         "gpu": {"poll_interval_ns": 2000.0 if not stalls else 0.0}, "receiver": stalls})
    result = buffer.need(params, 0.3, size)
    assert result.feasible
    wire_ns = paths.path_timing("gpu_push", params.build_topology(), size, params).wire_busy_ns
    assert buffer.longest_gpu_wait_ns(params, result.buffer_bytes, 0.3, size) <= wire_ns


def test_the_buffer_holds_a_slot_for_every_packet_of_a_message():
    # at 10 % of line rate less than one 4 KiB packet is in the loop: one 4112 B slot was
    # the answer, so a 4097 B message's 17 B packet waited for its first packet's slot to
    # come back (the GPU waited 78 us); both slots are needed, 4112 + 17 B
    params = Params().updated({"gpu": {"poll_interval_ns": 0.0}})
    result = buffer.need(params, 0.1, 4097)
    assert result.buffer_bytes == 4112 + 17
    wire_ns = paths.path_timing("gpu_push", params.build_topology(), 4097, params).wire_busy_ns
    assert buffer.longest_gpu_wait_ns(params, result.buffer_bytes, 0.1, 4097) <= wire_ns


def test_a_host_staged_message_is_in_only_once_every_chunks_last_bytes_are():
    # 64 KiB + 1 B is two bounce chunks; with a slow read stream (0.5 Gb/s) the first
    # chunk's last bytes land 2 us after its engine time, the 1 B chunk's 16 ns after:
    # only the last chunk's round trip was added, so 64 KiB + 1 B was in the NIC 1.15 us
    # before 64 KiB was
    params = Params(path="host_staged").updated({"nic": {"read_outstanding": 1, "read_stream_gbps": 0.5},
                                                 "link": {"mrrs_bytes": 128}})
    topology = params.build_topology()

    def in_nic_ns(size):
        timing = paths.path_timing("host_staged", topology, size, params)
        return sum(timing.stage_ns(stage) for stage in ("pre", "ingress", "post"))

    assert in_nic_ns(65537) >= in_nic_ns(65536)


def test_overrides_that_are_not_a_table_are_refused_by_name(tmp_path):
    # a calibration file's ``params = 5`` reached Params.updated and ended in AttributeError
    with pytest.raises(ParamError, match=r"params=5 .*a table of sections"):
        Params().updated(5)
    file = tmp_path / "cal.toml"
    file.write_text("params = 5\n")
    with pytest.raises(ParamError, match=r"params=5"):
        Params().with_calibration(file)


@pytest.mark.parametrize("section, key, value", [("gpu", "store_rate_gbps", 1e-320),
                                                 ("network", "propagation_ns", 1e-200)])
def test_a_positive_value_too_small_for_a_finite_quotient_is_refused(section, key, value):
    # 1e-320 passed "> 0"; bytes / rate overflowed to inf, and model buffer ended in
    # "cannot convert float NaN to integer"
    with pytest.raises(ParamError, match=rf"{section}.{key}=.*>= 1e-100"):
        Params().updated({section: {key: value}})
    smallest = Params().updated({section: {key: 1e-100}})
    # the smallest allowed value still gives a finite latency
    assert np.isfinite(paths.latency_ns("gpu_push", smallest.build_topology(), 4096, smallest))


def test_a_bounce_chunk_smaller_than_a_cache_line_is_refused():
    # the host_staged pipeline is walked chunk by chunk: 1-byte chunks of 1 MiB took minutes
    with pytest.raises(ParamError, match=r"nic.bounce_chunk_bytes=1 .*>= 64"):
        Params().updated({"nic": {"bounce_chunk_bytes": 1}})
    Params().updated({"nic": {"bounce_chunk_bytes": 64}})


def test_a_simulation_of_more_packets_than_the_bound_is_refused_before_any_path_is_timed(monkeypatch):
    # 2000 messages of 2 GiB are a billion packets: the process was killed for memory
    # after minutes. The bound counts packets (a message per MTU of payload, at least
    # one); it is lowered here so that a broken check cannot take the machine's memory
    from gpuwrite.model import checks

    monkeypatch.setattr(checks, "MAX_PACKETS", 100)
    with pytest.raises(ParamError, match=r"26 messages of 104 packets.*at most 100 packets"):
        sim.prepare(Params(), Workload(n_messages=26, size_bytes=16384), 0)
    assert sim.prepare(Params(), Workload(n_messages=25, size_bytes=16384), 0).n_packets == 100
    # a smaller MTU counts more packets for the same bytes
    with pytest.raises(ParamError, match=r"packets per message of network.mtu_bytes=256"):
        sim.prepare(Params().updated({"network": {"mtu_bytes": 256}}),
                    Workload(n_messages=7, size_bytes=4096), 0)
    # an empty message is one packet
    with pytest.raises(ParamError, match=r"101 messages of 101 packets"):
        sim.prepare(Params(), Workload(n_messages=101, size_bytes=0), 0)


def test_a_workload_built_in_code_keeps_the_simulators_bounds():
    # the bounds were checked only for a workload read from a file: Workload(n_messages=7e9)
    # was accepted, and buffer.longest_gpu_wait_ns with a 1000 s stall period tried to
    # simulate 7,249,879,168 messages (54 GiB, a MemoryError)
    with pytest.raises(ParamError, match=r"workload.n_messages=7000000000 .*<= 10,000,000"):
        Workload(n_messages=7_000_000_000, size_bytes=64)
    stalls = Params().updated({"receiver": {"stall_period_ns": 1e12, "stall_duration_ns": 5e11}})
    with pytest.raises(ParamError, match=r"workload.n_messages=7249879168"):
        buffer.longest_gpu_wait_ns(stalls, 1 << 20, 0.1)
