"""The model figures issue 13 added or changed: Fig. 6's sensitivity panel, Fig. 7, Fig. 8,
and the caveat each model figure prints under itself."""
from pathlib import Path

import numpy as np
import pytest
import tomli_w

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from gpuwrite.experiments.render import draw
from gpuwrite.experiments.spec import load_spec
from gpuwrite.experiments.sweep import run_spec
from gpuwrite.model import buffer, paths, validation
from gpuwrite.model.params import Params

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def tiny(name, tmp_path, keep=None, vary=None, fixed=None):
    """experiments/<name>.toml with only the sweeps in ``keep`` and shorter lists."""
    data = tomllib.loads((EXPERIMENTS / f"{name}.toml").read_text())
    data["sweep"] = [s for s in data["sweep"] if keep is None or s["name"] in keep]
    for sweep in data["sweep"]:
        sweep.setdefault("vary", {}).update((vary or {}).get(sweep["name"], {}))
        sweep.setdefault("fixed", {}).update((fixed or {}).get(sweep["name"], {}))
    path = tmp_path / f"{name}.toml"
    path.write_text(tomli_w.dumps(data))
    spec = load_spec(path)
    run_spec(spec, tmp_path / "results", pool=None)
    return draw(spec, tmp_path / "results")


def caveat(fig):
    return " ".join(t.get_text() for t in fig.texts if t.get_gid() == "caveat")


def test_fig6_sensitivity_panel_is_the_push_margin_over_the_best_other_path(tmp_path):
    fig, table = tiny("fig6_push_wins", tmp_path, keep=("sensitivity",))
    image = {im.get_gid(): im for ax in fig.axes for im in ax.images}["margin|sensitivity"]
    grid = np.asarray(image.get_array())
    outstanding = sorted(table["nic.read_outstanding"].unique())
    caps = sorted(table["platform.p2p_read_cap_gbps"].unique(), key=lambda c: (c == 0, -c))
    for i, reads in enumerate(outstanding):
        for j, cap in enumerate(caps):
            params = Params().updated({"nic": {"read_outstanding": int(reads)},
                                       "platform": {"p2p_read_cap_gbps": float(cap)}})
            rates = {p: paths.throughput_gbps(p, "across_root_ports", 65536, params)
                     for p in ("nic_pull", "host_staged", "gpu_push")}
            expected = (rates["gpu_push"] / max(rates["nic_pull"], rates["host_staged"]) - 1) * 100
            assert grid[i, j] == pytest.approx(expected)
    assert grid[0, 0] > grid[-1, 0]               # fewer reads in flight: a larger push margin
    assert image.norm.vmin >= 0 or np.nanmin(grid) < 0   # no colour-bar half that no cell uses
    assert "read_outstanding" in caveat(fig) and "P2P read cap" in caveat(fig)


def test_fig7_points_are_the_simulation_and_lines_the_closed_form(tmp_path):
    fig, table = tiny("fig7_throughput_vs_buffer", tmp_path, keep=("steady",),
                      vary={"steady": {"topology": ["same_switch"], "nic.staging_buffer_bytes": [16384, 65536]}},
                      fixed={"steady": {"workload.n_messages": 2000}})
    drawn = {line.get_gid(): line for ax in fig.axes for line in ax.get_lines() if line.get_gid()}
    points = drawn["same_switch|steady|simulated"]
    rows = table.sort_values("nic.staging_buffer_bytes")
    np.testing.assert_allclose(points.get_ydata(), rows["throughput_gbps"])
    closed = drawn["same_switch|steady|closed form"]
    need = buffer.need(Params(), 0.5)
    x, y = closed.get_xdata(), closed.get_ydata()
    expected = np.minimum(need.max_gbps, np.floor(x / 4112) * 4096 * 8 / need.staging_loop_ns)
    np.testing.assert_allclose(y, expected)
    # the simulated points sit on the closed form
    for size, measured in zip(rows["nic.staging_buffer_bytes"], rows["throughput_gbps"]):
        assert measured == pytest.approx(min(need.max_gbps, (size // 4112) * 4096 * 8 / need.staging_loop_ns),
                                         rel=0.02)
    assert "feedback" in caveat(fig)


def test_fig8_prints_every_validation_row_and_marks_the_misses(tmp_path):
    fig, _ = tiny("fig8_validation", tmp_path)
    (mesh,) = [c for ax in fig.axes for c in ax.collections if c.get_gid() == "validation|colours"]
    frame = validation.table()
    colours = np.asarray(mesh.get_array())
    assert len(colours) == len(frame) + 1                     # a header row plus one per comparison
    red = int((colours[1:, 0, :3] != 1.0).any(axis=1).sum())
    assert red == int((frame["within_goal"] == False).sum())  # noqa: E712
    assert validation.summary(frame) in caveat(fig)


@pytest.mark.parametrize("name", ["fig1_latency", "fig2_pcie_efficiency"])
def test_model_figures_carry_their_caveat(name, tmp_path):
    vary = {"model": {"size_bytes": [64, 4096]}}
    if name == "fig1_latency":
        vary["model"]["topology"] = ["same_switch"]
    fig, _ = tiny(name, tmp_path, vary=vary)
    assert "Model" in caveat(fig)
