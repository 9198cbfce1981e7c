"""gpuwrite calibrate: refuses the simulator unless asked; writes what Params.with_calibration applies."""
import itertools

import pytest

from gpuwrite.bench import calib
from gpuwrite.cli import main
from gpuwrite.cudaenv import SIMULATOR
from gpuwrite.model import Params
from gpuwrite.model import topology as topo

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


@pytest.mark.skipif(not SIMULATOR, reason="checks the refusal on a machine without a GPU")
def test_refuses_the_simulator_without_the_flag(tmp_path, capsys):
    assert main(["calibrate", "--out", str(tmp_path / "c.toml")]) == 3   # no usable GPU (NoGPUError)
    err = capsys.readouterr().err
    assert "--allow-simulator" in err and "none was found" in err
    assert not (tmp_path / "c.toml").exists()


def test_file_is_labelled_and_the_model_applies_it(tmp_path, capsys):
    out = tmp_path / "calibration.toml"
    assert main(["calibrate", "--allow-simulator", "--runs", "1", "--out", str(out), "--json"]) == 0
    text = out.read_text()
    data = tomllib.loads(text)
    assert data["device"]["simulator"] == SIMULATOR and data["device"]["date"]
    assert "driver" in data["device"] and data["device"]["name"]
    if SIMULATOR:
        assert "SIMULATOR" in text and data["device"]["name"] == "cudasim"
    assert set(data["measurements"]) == set(calib.WHAT)
    for name, entry in data["measurements"].items():
        assert entry["unit"] == calib.WHAT[name][0] and entry["value"] > 0 and len(entry["runs"]) == 1
    params = Params().with_calibration(out)
    assert params.gpu.store_rate_gbps == data["params"]["gpu"]["store_rate_gbps"]
    assert params.gpu.copy_rate_gbps == data["params"]["gpu"]["copy_rate_gbps"]
    assert params.gpu.write_issue_ns == data["params"]["gpu"]["write_issue_ns"]
    assert set(data["derivation"]) >= {"gpu.store_rate_gbps", "gpu.copy_rate_gbps", "gpu.write_issue_ns",
                                       "gpu.read_jitter_ns", "gpu.copy_setup_h2d_ns", "gpu.copy_setup_d2h_ns"}
    assert set(data["sweeps"]) == {"host_loads_vs_outstanding", "warp_read_vs_size", "copy_queued_vs_size"}
    assert all(p["lines_in_flight"] == calib.WARP_READ_LINES_IN_FLIGHT for p in data["sweeps"]["warp_read_vs_size"])
    # the push's least by size and block (Fig. 9's dotted line): the fastest of its runs
    plan = calib.PUSH_LEAST["simulator" if SIMULATOR else "full"]
    least = data["push_least_vs_size"]
    assert [(p["size_bytes"], p["block_threads"]) for p in least] == \
        [(n, t) for t in plan["threads"] for n in plan["sizes"]]
    assert all(p["least_us"] == min(p["runs"]) > 0 and len(p["runs"]) == 1 for p in least)
    assert params.gpu.copy_setup_d2h_ns == data["params"]["gpu"]["copy_setup_d2h_ns"]


def test_the_push_least_is_the_fastest_of_its_runs(monkeypatch):
    """A least is what the hardware allowed at its fastest: each (size, block) keeps the
    fastest of its runs, and every run beside it."""
    times = itertools.cycle([3.6, 3.3, 3.5])     # as many runs as the plan asks, GPU or not
    asked = []

    def least(nbytes, threads, iters):
        asked.append((nbytes, threads))
        return next(times)

    monkeypatch.setattr(calib.suite, "least_push_stores_us", least)
    for simulator in (True, False):     # the simulator's plan and a GPU's
        monkeypatch.setattr(calib, "SIMULATOR", simulator)
        asked.clear()
        out = calib.measure_push_least(runs=3)
        plan = calib.PUSH_LEAST["simulator" if simulator else "full"]
        assert len(out) == len(plan["sizes"]) * len(plan["threads"])
        assert all(p["least_us"] == 3.3 and p["runs"] == [3.6, 3.3, 3.5] for p in out)
        assert asked[::3] == [(p["size_bytes"], p["block_threads"]) for p in out]


def test_reference_measurements_give_the_default_parameters():
    # shared/calibration/h200-pcie5-2026-11.md: 52.4 GB/s stores, 55.1 GB/s D2H copies, 1.14 us host read
    medians = {"bulk_store_to_host": 52.4, "copy_engine_d2h": 55.1, "host_read_round_trip": 1.14}
    params, _ = calib.calibration_params(medians, {"pcie.link.gen.max": "5", "pcie.link.width.max": "16"})
    default = Params()
    assert params["gpu"]["store_rate_gbps"] == pytest.approx(default.gpu.store_rate_gbps)
    assert params["gpu"]["copy_rate_gbps"] == pytest.approx(default.gpu.copy_rate_gbps)
    assert params["gpu"]["write_issue_ns"] == pytest.approx(topo.GPU_READ_ISSUE_NS / 2)
    assert params["link"] == {"generation": 5, "width": 16}


def test_an_experiment_can_use_a_calibration_file(tmp_path):
    from gpuwrite.experiments.spec import load_spec, resolve

    (tmp_path / "cal.toml").write_text('[device]\nname = "x"\n[params.gpu]\nstore_rate_gbps = 123.0\n')
    (tmp_path / "spec.toml").write_text('[[sweep]]\nname = "m"\nbackend = "model"\nmeasure = "latency"\n'
                                        '[sweep.fixed]\ncalibration = "cal.toml"\n[sweep.vary]\nsize_bytes = [64]\n')
    sweep = load_spec(tmp_path / "spec.toml").sweeps[0]
    assert resolve(sweep, sweep.points()[0], "model")["params"]["gpu"]["store_rate_gbps"] == 123.0


def test_load_chains_never_meet_and_a_short_chain_is_refused():
    import numpy as np

    from gpuwrite.cudaenv import cuda
    from gpuwrite.host.memory import mapped

    outstanding, n_loads = 4, 3
    words = calib.chain_words(outstanding, n_loads)
    chain = mapped((words,), np.uint32)
    chain.host[:] = calib._chain(words)
    assert calib.loads_per_us(chain.kernel, outstanding, n_loads) > 0
    # each chain's loads (its start and n_loads - 1 lines after it) end before the next chain's start;
    # its last load returns the address after them
    spacing = words // outstanding
    out = cuda.to_device(np.zeros(outstanding, dtype=np.int64))
    sink = cuda.to_device(np.zeros(outstanding, dtype=np.uint32))
    calib._load_chains[1, outstanding](chain.kernel, outstanding, n_loads, spacing, out, sink)
    ends = sink.copy_to_host()
    assert list(ends) == [(t * spacing + n_loads * calib.CHAIN_STRIDE_WORDS) % words for t in range(outstanding)]
    assert all(t * spacing + (n_loads - 1) * calib.CHAIN_STRIDE_WORDS < (t + 1) * spacing for t in range(outstanding))
    with pytest.raises(ValueError, match="too short"):
        calib.loads_per_us(chain.kernel, outstanding * 2, n_loads)


def test_sweeps_define_the_jitter_and_the_copy_setups():
    from gpuwrite.model import pcie, requester

    round_trip_ns = 1200.0
    step_ns = round_trip_ns + 80.0 * (requester.harmonic(32) - 1)
    sweeps = {"host_loads_vs_outstanding": [{"outstanding": 32, "loads_per_us": 32e3 / step_ns},
                                            {"outstanding": 64, "loads_per_us": 1.0}],
              "copy_queued_vs_size": [{"direction": "d2h", "size_bytes": 4096, "gbytes_per_s": 4096 / 5000.0},
                                      {"direction": "d2h", "size_bytes": 1 << 20, "gbytes_per_s": 40.0}]}
    params, derivation = {"gpu": {}, "link": {"generation": 5, "width": 16}}, {}
    calib.sweep_params(sweeps, round_trip_ns, params, derivation)
    assert params["gpu"]["read_jitter_ns"] == pytest.approx(80.0, abs=0.05)
    link = pcie.LinkConfig(generation=5, width=16)
    assert params["gpu"]["copy_setup_d2h_ns"] == pytest.approx(
        5000.0 - 4096 * 8 / pcie.effective_rate_gbps(link, "write", 4096), abs=0.05)
    assert "copy_setup_h2d_ns" not in params["gpu"] and "32 loads in flight" in derivation["gpu.read_jitter_ns"]
    assert Params().updated({"gpu": params["gpu"]}).gpu.read_jitter_ns == params["gpu"]["read_jitter_ns"]
    # the largest point of loads in flight (64, two warps) defines the completer's time per read
    service_ns, used = requester.fit_read_service(sweeps["host_loads_vs_outstanding"], round_trip_ns, 80.0)
    assert used == 64 and params["gpu"]["read_service_ns"] == pytest.approx(service_ns, rel=1e-3)
    assert "at 64 loads in flight" in derivation["gpu.read_service_ns"]
    assert Params().updated({"gpu": params["gpu"]}).gpu.read_service_ns == params["gpu"]["read_service_ns"]
