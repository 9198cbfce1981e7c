"""Each figure is drawn from its stored table, and what it plots equals the table."""
import numpy as np
import pandas as pd
import pytest

from gpuwrite.cudaenv import SIMULATOR

from gpuwrite.experiments import figures, store
from gpuwrite.experiments.figures import FIGURES, NO_GPU_NOTE
from gpuwrite.experiments.render import draw
from gpuwrite.model.topology import PRESETS
from tiny_specs import EXPERIMENTS


# These check what a machine without a GPU does (simulator rows, GPU-only sweeps skipped,
# "no GPU measurements" notes); on a GPU the same commands measure instead.
CPU_ONLY = pytest.mark.skipif(not SIMULATOR, reason="checks the behaviour of a machine without a GPU")


def stored(tiny_results, name):
    """The figure drawn through render.draw (from the files) and the table read back separately."""
    root, specs = tiny_results
    fig, _ = draw(specs[name], root / "results")
    return fig, pd.read_parquet(store.table_path(root / "results", name))


def lines(fig):
    """Every plotted line that carries a gid, by gid."""
    return {line.get_gid(): line for ax in fig.axes for line in ax.get_lines() if line.get_gid()}


def check_line(line, x, y):
    order = np.argsort(np.asarray(x, dtype=float), kind="stable")
    np.testing.assert_allclose(line.get_xdata(), np.asarray(x, dtype=float)[order])
    np.testing.assert_allclose(line.get_ydata(), np.asarray(y, dtype=float)[order])


def texts(fig):
    """Every text of the figure: in its axes and under them (caveats)."""
    return " ".join([t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for t in fig.texts])


def test_fig1_latency_lines_equal_the_table(tiny_results):
    fig, table = stored(tiny_results, "fig1_latency")
    drawn = lines(fig)
    assert len(drawn) == 2 * 3
    for (path, topology), rows in table.groupby(["path", "topology"]):
        check_line(drawn[f"{path}|{topology}"], rows["size_bytes"], rows["latency_ns"] / 1e3)
    assert all("(µs)" in ax.get_ylabel() for ax in fig.axes if ax.get_ylabel())


def test_fig2_efficiency_lines_and_the_worked_example(tiny_results):
    fig, table = stored(tiny_results, "fig2_pcie_efficiency")
    drawn = lines(fig)
    for label, operation, rcb, chunks in figures.EFFICIENCY_SERIES:
        for mps in (128, 256, 512):
            rows = table[(table["operation"] == operation) & (table["link.rcb_bytes"] == rcb)
                         & (table["link.rcb_chunks"] == chunks) & (table["link.mps_bytes"] == mps)]
            check_line(drawn[f"{operation}-{rcb}-{chunks}|{mps}"], rows["size_bytes"], rows["efficiency"] * 100)
    star = drawn["example|256"]
    assert star.get_xdata()[0] == 512
    assert star.get_ydata()[0] == pytest.approx(100 * 512 / 552)      # 92.75 %
    assert "92.75 %" in texts(fig)


def test_fig3_occupancy_drops_and_buffer_sweep_equal_the_table(tiny_results):
    fig, table = stored(tiny_results, "fig3_buffer_stall")
    drawn = lines(fig)
    series = table[table["output"] == "timeseries"]
    for policy, rows in series.groupby("nic.policy"):
        check_line(drawn[f"{policy}|occupancy"], rows["time_ns"] / 1e3, rows["staging_bytes"] / 1024)
        check_line(drawn[f"{policy}|dropped"], rows["time_ns"] / 1e3, rows["dropped_bytes"] / 1024)
    summary = table[table["sweep"] == "buffer"]
    for policy, rows in summary.groupby("nic.policy"):
        check_line(drawn[f"{policy}|drops"], rows["network.vl_buffer_bytes"], rows["dropped"] / rows["messages"] * 100)
    assert (summary[summary["nic.policy"] == "hold"]["dropped"] == 0).all()
    assert summary[summary["nic.policy"] == "drop"]["dropped"].max() > 0
    assert any(p.get_hatch() for ax in fig.axes for p in ax.patches)   # stalls shaded and hatched


@CPU_ONLY
def test_fig4_model_lines_and_no_gpu_note(tiny_results):
    fig, table = stored(tiny_results, "fig4_throughput")
    drawn = lines(fig)
    model = table[table["backend"] == "model"]
    for path, rows in model.groupby("path"):
        check_line(drawn[f"{path}|model"], rows["size_bytes"], rows["throughput_gbps"])
    simulated = table[table["backend"] == "emulated"]
    assert len(simulated) == 2 and set(simulated["device"]) == {"cudasim"}
    assert set(drawn) == {f"{p}|model" for p in model["path"].unique()}   # simulator timings not plotted
    assert "No GPU measurements stored" in texts(fig) and "2/2 runs delivered every byte" in texts(fig)


def fake_gpu_rows(table, columns):
    """Rows as a GPU run would store them; only for testing the overlay, never written to experiments/."""
    rows = table.copy()
    rows["device"] = "Test GPU"
    for column, values in columns.items():
        rows[column] = values
    return rows


@CPU_ONLY
def test_fig4_overlays_gpu_measurements(tiny_results):
    _, table = stored(tiny_results, "fig4_throughput")
    emulated = table[table["backend"] == "emulated"]
    gpu = fake_gpu_rows(emulated, {"throughput_gbps": [12.5, 40.0]})
    fig = FIGURES["throughput_vs_size"](pd.concat([table, gpu], ignore_index=True))
    check_line(lines(fig)["gpu_push|Test GPU"], gpu["size_bytes"], gpu["throughput_gbps"])
    assert "No GPU measurements stored" not in texts(fig)


def ranges(fig):
    """Every min-to-max bar collection, by gid: {x: (min, max)}."""
    out = {}
    for ax in fig.axes:
        for collection in ax.collections:
            if collection.get_gid() and collection.get_gid().endswith("|range"):
                out[collection.get_gid()] = {float(seg[0][0]): (float(seg[0][1]), float(seg[1][1]))
                                             for seg in collection.get_segments()}
    return out


def three_runs(rows, column, runs):
    """``rows`` three times, ``column`` of run k taken from ``runs[k]``, ``repeat`` = k."""
    out = []
    for k, values in enumerate(runs):
        run = rows.copy()
        run[column] = values
        run["repeat"] = k
        out.append(run)
    return pd.concat(out, ignore_index=True)


@CPU_ONLY
def test_fig4_draws_the_median_of_the_runs_and_their_range(tiny_results):
    _, table = stored(tiny_results, "fig4_throughput")
    emulated = table[table["backend"] == "emulated"].sort_values("size_bytes")
    gpu = three_runs(fake_gpu_rows(emulated, {}), "throughput_gbps", [[12.5, 40.0], [3.0, 44.0], [20.0, 41.0]])
    fig = FIGURES["throughput_vs_size"](pd.concat([table, gpu], ignore_index=True))
    sizes = sorted(emulated["size_bytes"])
    check_line(lines(fig)["gpu_push|Test GPU"], sizes, [12.5, 41.0])
    assert ranges(fig)["gpu_push|Test GPU|range"] == {sizes[0]: (3.0, 20.0), sizes[1]: (40.0, 44.0)}
    assert "median of 3 runs a point (bars: min to max)" in texts(fig)


@CPU_ONLY
def test_fig4_leaves_out_incomplete_gpu_runs_and_names_them(tiny_results):
    _, table = stored(tiny_results, "fig4_throughput")
    emulated = table[table["backend"] == "emulated"]
    gpu = fake_gpu_rows(emulated, {"throughput_gbps": [12.5, 40.0], "sent_messages": [100, 100],
                                   "delivered_messages": [100, 7],
                                   "failure": ["", "1 QP: timed out waiting for a completion"]})
    fig = FIGURES["throughput_vs_size"](pd.concat([table, gpu], ignore_index=True))
    complete = gpu[gpu["delivered_messages"] == gpu["sent_messages"]]
    check_line(lines(fig)["gpu_push|Test GPU"], complete["size_bytes"], complete["throughput_gbps"])
    assert "7/100 delivered, 1 QP: timed out waiting for a completion" in texts(fig)


@CPU_ONLY
def test_fig5_says_no_gpu_and_draws_gpu_cdfs(tiny_results):
    root, specs = tiny_results
    fig, _ = draw(specs["fig5_latency_cdf"], root / "results")
    assert NO_GPU_NOTE in texts(fig) and not lines(fig)
    latencies = np.array([5200, 4800, 5100, 9000, 5000], dtype=float)
    gpu = pd.DataFrame({"figure": "fig5_latency_cdf", "sweep": "cdf", "backend": "emulated", "measure": "",
                        "output": "latencies", "path": "gpu_push", "size_bytes": 64,
                        "latency_ns": latencies, "device": "Test GPU"})
    fig = FIGURES["latency_cdf"](gpu)
    line = lines(fig)["gpu_push|64|Test GPU"]
    np.testing.assert_allclose(line.get_xdata(), np.sort(latencies) / 1e3)
    np.testing.assert_allclose(line.get_ydata(), np.arange(1, 6) / 5)
    assert NO_GPU_NOTE not in texts(fig)


def test_fig5_draws_the_median_run_in_full_and_the_others_faint():
    # Three runs of one curve: the run whose median is the middle one is the curve; the
    # slow run and the fast run are drawn faint, each with its run number.
    runs = {0: [9000, 9100, 9200], 1: [5000, 5100, 5200], 2: [3000, 3100, 3200]}
    gpu = pd.concat([pd.DataFrame({"figure": "fig5_latency_cdf", "sweep": "cdf", "backend": "emulated",
                                   "measure": "", "output": "latencies", "path": "gpu_push",
                                   "size_bytes": 4096, "repeat": k, "latency_ns": np.array(v, dtype=float),
                                   "device": "Test GPU"}) for k, v in runs.items()])
    fig = FIGURES["latency_cdf"](gpu)
    drawn = lines(fig)
    np.testing.assert_allclose(drawn["gpu_push|4096|Test GPU"].get_xdata(), np.array(runs[1]) / 1e3)
    np.testing.assert_allclose(drawn["gpu_push|4096|Test GPU|run 1"].get_xdata(), np.array(runs[0]) / 1e3)
    np.testing.assert_allclose(drawn["gpu_push|4096|Test GPU|run 3"].get_xdata(), np.array(runs[2]) / 1e3)
    assert "gpu_push|4096|Test GPU|run 2" not in drawn
    assert drawn["gpu_push|4096|Test GPU|run 1"].get_alpha() < 1


def test_fig6_map_equals_margins_computed_from_the_table(tiny_results):
    fig, table = stored(tiny_results, "fig6_push_wins")
    images = {image.get_gid(): image for ax in fig.axes for image in ax.images}
    for sweep, measure, column in (("latency", "latency", "latency_ns"),
                                   ("throughput", "throughput", "throughput_gbps"),
                                   ("latency_after_doorbell", "latency", "latency_ns")):
        rows = table[table["sweep"] == sweep]
        topologies = [t for t in PRESETS if t in set(rows["topology"])]
        sizes = sorted(rows["size_bytes"].unique())
        expected = np.empty((len(topologies), len(sizes)))
        for i, topology in enumerate(topologies):
            for j, size in enumerate(sizes):
                here = rows[(rows["topology"] == topology) & (rows["size_bytes"] == size)].set_index("path")[column]
                push, others = here["gpu_push"], here.drop("gpu_push")
                expected[i, j] = (others.min() / push - 1 if measure == "latency" else push / others.max() - 1) * 100
        np.testing.assert_allclose(np.asarray(images[f"margin|{sweep}"].get_array()), expected)
    assert "+" in texts(fig)
    # stored whole before the doorbell, push loses at 1 MiB on one switch (the third map)
    whole = table[(table["sweep"] == "latency_after_doorbell") & (table["size_bytes"] == 1048576) &
                  (table["topology"] == "same_switch")].set_index("path")["latency_ns"]
    assert whole["gpu_push"] > whole["nic_pull"]


@pytest.mark.parametrize("name", ["fig1_latency", "fig2_pcie_efficiency", "fig3_buffer_stall",
                                  "fig4_throughput", "fig6_push_wins"])
def test_series_differ_in_marker_or_line_style_not_only_colour(tiny_results, name):
    fig, _ = stored(tiny_results, name)
    for ax in fig.axes:
        styles = [(line.get_linestyle(), line.get_marker()) for line in ax.get_lines()
                  if line.get_gid() and not line.get_gid().startswith("example")]
        assert len(styles) == len(set(styles)), f"{name}: two series look alike in greyscale"
    labelled = [ax for ax in fig.axes if ax.get_xlabel()]
    assert labelled and all("(" in ax.get_xlabel() for ax in labelled)     # units on every axis label


def test_every_figure_kind_has_a_file():
    from gpuwrite.experiments.spec import find_specs, load_spec

    kinds = {load_spec(f).figure_kind for f in find_specs(EXPERIMENTS)}
    assert kinds == set(FIGURES)


def test_fig9_draws_the_median_of_the_runs_their_range_and_the_physical_line():
    base = pd.DataFrame({"figure": "fig9_emulated_latency", "sweep": "emulated", "backend": "emulated",
                         "measure": "", "output": "summary", "path": "gpu_push",
                         "size_bytes": [64, 65536, 64, 65536], "block_threads": [32, 32, 256, 256],
                         "sent_messages": 200, "delivered_messages": 200, "device": "Test GPU"})
    gpu = three_runs(base, "latency_p50_us", [[4.0, 30.0, 3.5, 11.0], [6.0, 29.0, 3.4, 12.0],
                                              [4.5, 31.0, 3.6, 10.0]])
    cal = {"floor_us": 3.0, "ceiling_gbytes": 50.0, "device": "Test GPU", "file": "test.toml"}
    fig = FIGURES["emulated_latency_vs_size"](gpu, calibration=cal)
    drawn = lines(fig)
    check_line(drawn["gpu_push|32"], [64, 65536], [4.5, 30.0])
    check_line(drawn["gpu_push|256"], [64, 65536], [3.5, 11.0])
    assert ranges(fig)["gpu_push|32|range"] == {64.0: (4.0, 6.0), 65536.0: (29.0, 31.0)}
    physical = drawn["physical|32"]
    np.testing.assert_allclose(physical.get_ydata(), 3.0 + physical.get_xdata() / 50e3)
    assert "Median of 3 runs a point (bars: min to max)" in texts(fig)
    # the step the engine's copy stands for, and that it costs more than that step
    assert "costs more than a 400 Gb/s wire" in " ".join(texts(fig).split())
    assert "Not plotted" not in texts(fig)
    assert "push_least|32" not in drawn and "Dotted" not in texts(fig)
    # a calibration since session 36 also holds gpu_push's least by size and block: dotted,
    # in the panel of its block only
    least = {**cal, "push_least": {(64, 32): 3.4, (65536, 32): 5.0, (64, 256): 3.3}}
    drawn = lines(FIGURES["emulated_latency_vs_size"](gpu, calibration=least))
    check_line(drawn["push_least|32"], [64, 65536], [3.4, 5.0])
    check_line(drawn["push_least|256"], [64], [3.3])
    fig = FIGURES["emulated_latency_vs_size"](gpu, calibration=least)
    assert "Dotted: gpu_push's least" in " ".join(texts(fig).split())
    # a run in which messages never completed is left out of the median and named
    failed = gpu.copy()
    failed.loc[0, ["delivered_messages", "latency_p50_us"]] = [0, 1e6]
    failed["failure"] = ""
    failed.loc[0, "failure"] = "1 QP: a completion carried an error syndrome (local_prot_err, pull_failed)"
    fig = FIGURES["emulated_latency_vs_size"](failed, calibration=cal)
    check_line(lines(fig)["gpu_push|32"], [64, 65536], [5.25, 30.0])    # runs 2 and 3 at 64 B
    assert "Median of 2 to 3 runs a point" in texts(fig)
    assert "gpu_push 64 B (run 1): 0/200 delivered, 1 QP: a completion carried an error " \
        "syndrome (local_prot_err, pull_failed), 32 threads" in texts(fig).replace("\n", " ")


def test_fig9_reads_the_push_least_from_the_newest_calibration(tmp_path):
    """newest_calibration gives Fig. 9 the file's push least by (size, block), and none
    from a file before session 36."""
    from gpuwrite.experiments.figures import newest_calibration

    head = ('[device]\nname = "Test GPU"\ndate = "2026-11-28"\n'
            '[measurements.doorbell_pingpong]\nvalue = 3.0\nunit = "us"\n'
            '[measurements.bulk_store_to_host]\nvalue = 52.0\nunit = "GB/s"\n')
    (tmp_path / "test-gpu-2026-11-28.toml").write_text(
        head + '[[push_least_vs_size]]\nsize_bytes = 1024\nblock_threads = 256\n'
        'least_us = 3.3\nruns = [3.3, 3.5]\n')
    cal = newest_calibration(tmp_path, devices=["Test GPU"])
    assert cal["push_least"] == {(1024, 256): 3.3} and cal["floor_us"] == 3.0
    (tmp_path / "test-gpu-2026-11-28.toml").write_text(head)
    assert newest_calibration(tmp_path, devices=["Test GPU"])["push_least"] == {}


def test_fig4_says_which_assumption_its_model_lines_rest_on():
    """Fig. 4's model lines put host_staged below line rate only through the NIC's reads in
    flight (an assumption): the figure prints that under its axes, as every model figure does."""
    from gpuwrite.model import paths

    rows = [{"backend": "model", "measure": "throughput", "sweep": "model", "topology": "same_switch",
             "path": path, "size_bytes": size, "throughput_gbps": paths.throughput_gbps(path, "same_switch", size)}
            for path in ("nic_pull", "host_staged", "gpu_push") for size in (64, 4096)]
    fig = FIGURES["throughput_vs_size"](pd.DataFrame(rows))
    caveats = " ".join(t.get_text() for t in fig.texts if t.get_gid() == "caveat")
    assert "nic.read_outstanding = 64" in caveats and "assumption" in caveats and "same_switch" in caveats
