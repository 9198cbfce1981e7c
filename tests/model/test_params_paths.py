"""Parameters (TOML, validation, calibration hook) and the analytical path model."""
from pathlib import Path

import pytest

from gpuwrite.model import nic, paths, pcie
from gpuwrite.model import topology as topo
from gpuwrite.model.errors import ParamError
from gpuwrite.model.params import PATHS, Params, SimConfig, Workload

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments" / "model"


def test_params_round_trip_through_toml():
    params = Params().updated({"path": "nic_pull", "topology": "across_sockets", "link": {"mps_bytes": 512},
                               "receiver": {"stall_period_ns": 1000.0, "stall_duration_ns": 100.0}})
    again = Params.from_toml(params.to_toml())
    assert again == params
    assert again.link.mps_bytes == 512 and again.receiver.stall_duration_ns == 100.0


def test_unknown_keys_and_bad_values_name_what_is_allowed():
    with pytest.raises(ParamError) as info:
        Params.from_dict({"nic": {"polcy": "hold"}})
    assert "nic.polcy" in str(info.value) and "policy" in str(info.value)
    with pytest.raises(ParamError, match=r"nic.policy='keep'.*hold, drop"):
        Params().updated({"nic": {"policy": "keep"}})
    with pytest.raises(ParamError, match=r"path='rdma'.*nic_pull"):
        Params(path="rdma")
    with pytest.raises(ParamError, match="receiver.stall_duration_ns"):
        Params().updated({"receiver": {"stall_period_ns": 100.0, "stall_duration_ns": 100.0}})
    with pytest.raises(ParamError, match="workload.arrival"):
        Workload(arrival="bursty")
    with pytest.raises(ParamError, match="workload.weights"):
        Workload(size_kind="choice", sizes_bytes=(64, 128), weights=(1.0,))


def test_with_calibration_overrides_only_what_the_file_measures(tmp_path):
    file = tmp_path / "this_machine.toml"
    file.write_text("[params.gpu]\nstore_rate_gbps = 300.0\n[params.link]\ngeneration = 4\n")
    params = Params().with_calibration(file)
    assert params.gpu.store_rate_gbps == 300.0
    assert params.link.generation == 4
    assert params.link.width == Params().link.width
    assert params.gpu.copy_rate_gbps == Params().gpu.copy_rate_gbps


@pytest.mark.parametrize("file", sorted(EXPERIMENTS.glob("*.toml")), ids=lambda p: p.name)
def test_example_configs_load(file):
    config = SimConfig.from_toml(file)
    assert config.params.path in PATHS
    assert SimConfig.from_toml(config.to_toml()) == config


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", topo.PATH_CLASSES)
def test_latency_is_the_sum_of_the_steps(path, name):
    params = Params()
    steps = paths.steps(path, name, 128, params)
    assert paths.latency_ns(path, name, 128, params) == pytest.approx(sum(s.latency_ns for s in steps))
    assert {s.stage for s in steps} <= set(paths.STAGES)


def test_push_steps_are_the_route_hops_plus_endpoint_costs():
    params = Params()
    topology = topo.preset("across_switches")
    route = topology.route("gpu0", "nic0")
    size = 4096
    link = params.link
    pushed = size + nic.STAGE_HEADER_BYTES
    payload_ns = pushed * 8 / pcie.effective_rate_gbps(link, "write", pushed)
    doorbell_ns = pcie.write_wire_bytes(link, 64).data_direction_bytes * 8 / pcie.tlp_rate_gbps(link)  # WQE via BlueFlame
    cqe_ns = route.one_way_latency_ns + 64 * 8 / pcie.effective_rate_gbps(link, "write", 64)
    wire_ns = (size + params.network.header_bytes) * 8 / params.network.rate_gbps
    expected = (params.gpu.write_issue_ns + payload_ns + route.one_way_latency_ns + doorbell_ns
                + params.nic.processing_ns + wire_ns + 2 * params.network.propagation_ns + cqe_ns)
    assert paths.latency_ns("gpu_push", topology, size, params) == pytest.approx(expected)


def test_push_beats_pull_and_the_gap_grows_across_the_root_complex():
    params = Params()
    gaps = {}
    for name in topo.PATH_CLASSES:
        pull = paths.latency_ns("nic_pull", name, 4096, params)
        push = paths.latency_ns("gpu_push", name, 4096, params)
        assert push < pull
        gaps[name] = pull - push
    assert gaps["across_sockets"] > gaps["across_root_ports"] > gaps["same_switch"]
    # the read engine's outstanding requests cover fewer bytes per round trip the longer
    # the path; pushed writes do not wait for round trips
    assert paths.bottleneck("nic_pull", "across_root_ports", 65536, params)[0] == "pcie"
    assert (paths.throughput_gbps("nic_pull", "across_root_ports", 65536, params)
            < paths.throughput_gbps("nic_pull", "same_switch", 65536, params))
    assert paths.throughput_gbps("gpu_push", "across_root_ports", 65536, params) > 300.0
    # a platform P2P read cap, when set, is one more limit
    capped = params.updated({"platform": {"p2p_read_cap_gbps": 60.0}})
    assert paths.throughput_gbps("nic_pull", "across_root_ports", 65536, capped) == pytest.approx(60.0, rel=1e-6)


def test_inline_is_limited_to_inline_max():
    params = Params()
    assert paths.latency_ns("gpu_push_inline", "same_switch", 220, params) > 0
    with pytest.raises(ParamError, match=r"size_bytes=221.*inline_max_bytes \(220\)"):
        paths.latency_ns("gpu_push_inline", "same_switch", 221, params)


def test_host_staged_pipelines_chunks():
    small_chunks = Params().updated({"nic": {"bounce_chunk_bytes": 16384}})
    one_chunk = Params().updated({"nic": {"bounce_chunk_bytes": 1 << 20}})
    size = 1 << 20
    assert paths.latency_ns("host_staged", "same_switch", size, small_chunks) < \
        paths.latency_ns("host_staged", "same_switch", size, one_chunk)


def test_pcie_bytes_per_direction():
    params = Params()
    push = paths.pcie_bytes("gpu_push", "same_switch", 512, params)
    pull = paths.pcie_bytes("nic_pull", "same_switch", 512, params)
    assert push["gpu_out"] == pcie.write_wire_bytes(params.link, 512 + 16).data_direction_bytes + \
        pcie.write_wire_bytes(params.link, 64).data_direction_bytes
    # pull adds read requests towards the GPU and completion headers for payload and WQE
    assert pull["gpu_in"] > push["gpu_in"]
    assert pull["nic_in"] == pcie.read_wire_bytes(params.link, 512).data_direction_bytes + \
        pcie.read_wire_bytes(params.link, 64).data_direction_bytes + \
        pcie.write_wire_bytes(params.link, 8).data_direction_bytes


def test_network_credit_formulas():
    network = nic.NetworkParams()
    assert nic.credits_needed(network, 0) == 1
    assert nic.credits_needed(network, 4096) == -(-(4096 + 42) // 64)
    assert nic.credits_needed(network, 8192) == 2 * nic.credits_needed(network, 4096)
    assert nic.network_wire_bytes(network, 10000) == 10000 + 3 * 42
    assert nic.inline_wqe_bytes(220) == 256 and nic.inline_wqe_bytes(221) == 320


def test_errors_inside_a_section_name_the_section():
    with pytest.raises(ParamError, match=r"link.mps_bytes=300.*128, 256"):
        Params.from_dict({"link": {"mps_bytes": 300}})


def test_rank_paths_puts_push_first_and_works_on_a_read_topology():
    ranked = paths.rank_paths("across_sockets", 4096)
    assert ranked[0]["path"] == "gpu_push"
    assert [entry["latency_ns"] for entry in ranked] == sorted(entry["latency_ns"] for entry in ranked)
    assert "gpu_push_inline" not in {entry["path"] for entry in ranked}
    small = paths.rank_paths(topo.preset("same_switch"), 64, gpu="gpu0", nic="nic0")
    assert {entry["path"] for entry in small} == set(PATHS)
    with pytest.raises(ParamError, match="endpoint='gpu7'"):
        paths.rank_paths("same_switch", 64, gpu="gpu7")


def test_push_with_a_fetched_wqe_pays_a_read_round_trip():
    blueflame = Params()
    fetched = Params().updated({"nic": {"push_wqe_delivery": "fetch"}})
    route = topo.preset("across_root_ports").route("gpu0", "nic0")
    gap = (paths.latency_ns("gpu_push", "across_root_ports", 64, fetched)
           - paths.latency_ns("gpu_push", "across_root_ports", 64, blueflame))
    assert gap > 2 * route.one_way_latency_ns
    assert paths.latency_ns("gpu_push", "across_root_ports", 64, fetched) < \
        paths.latency_ns("nic_pull", "across_root_ports", 64, fetched)


def test_a_calibration_whose_params_is_not_a_table_is_named_with_its_file(tmp_path):
    """``Params.with_calibration`` (the model's, and an experiment file's calibration key)
    names a ``params`` that is not a table, and the file it came from."""
    file = tmp_path / "c.toml"
    file.write_text("params = 5\n")
    with pytest.raises(ParamError, match=r"calibration\.params=5 is not allowed; allowed: a table of keys "
                                         r"\(in .*c\.toml\)"):
        Params().with_calibration(file)
