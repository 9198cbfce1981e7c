"""The paper's figures, each drawn from an experiment's stored table and nothing else.

Each function takes the table (``store.load_results``: the regenerable rows and any
GPU-measured rows together) and returns a matplotlib ``Figure``. Every plotted line
carries a ``gid`` naming what it shows (``"<series>|<panel>"``) so tests can read the
plotted values back and compare them with the table. Timings from the CUDA simulator
are never plotted as measurements: they are Python threads, not a GPU.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from gpuwrite.calibfiles import calibration_dir, newest_first
from gpuwrite.experiments import style
from gpuwrite.experiments.backends import MODEL_DEVICE, SIMULATOR_DEVICE
from gpuwrite.model.topology import PRESETS

NO_GPU_NOTE = "no GPU measurements stored; run scripts/gpu_experiments.sh on a GPU"


def _no_gpu_figure():
    """A figure that only says no GPU measurements are stored (and how to make them)."""
    fig, axes = style.new_figure(1, 1, height=1.6)
    ax = axes[0, 0]
    ax.set_axis_off()
    style.note(ax, NO_GPU_NOTE, "center")
    return fig


def _select(df: pd.DataFrame, **conditions) -> pd.DataFrame:
    mask = pd.Series(True, index=df.index)
    for column, value in conditions.items():
        if column not in df:
            return df.iloc[0:0]
        mask &= df[column] == value
    return df[mask]


def gpu_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows measured on a real GPU (emulated mode)."""
    if "device" not in df or not len(df):
        return df.iloc[0:0]
    return df[(df["backend"] == "emulated") & ~df["device"].isin([SIMULATOR_DEVICE, MODEL_DEVICE])]


def _topologies(frame: pd.DataFrame) -> list[str]:
    present = set(frame["topology"])
    return [t for t in PRESETS if t in present] + sorted(present - set(PRESETS))


def _line(ax, x, y, gid: str, label: str | None, **style_kwargs):
    order = np.argsort(np.asarray(x, dtype=float), kind="stable")
    (line,) = ax.plot(np.asarray(x, dtype=float)[order], np.asarray(y, dtype=float)[order],
                      label=label, gid=gid, **style_kwargs)
    return line


def _runs(rows: pd.DataFrame, value: str) -> pd.DataFrame:
    """One row per size: the median, min and max of ``value`` over the runs of each point
    (an emulated sweep's ``repeat``s), and how many runs there were."""
    spread = rows.groupby("size_bytes")[value].agg(["median", "min", "max", "count"])
    return spread.reset_index()


def _line_with_runs(ax, rows: pd.DataFrame, value: str, gid: str, label: str, **style_kwargs):
    """The runs' median as a line (``gid``) and, where a point has several runs, their min
    to max as a bar (``gid + "|range"``)."""
    spread = _runs(rows, value)
    line = _line(ax, spread["size_bytes"], spread["median"], gid, label, **style_kwargs)
    several = spread[spread["count"] > 1]
    if len(several):
        ax.vlines(several["size_bytes"].to_numpy(dtype=float), several["min"].to_numpy(dtype=float),
                  several["max"].to_numpy(dtype=float), colors=line.get_color(), linewidth=1.2,
                  gid=f"{gid}|range")
    return line


def _incomplete_line(r) -> str:
    """One run in which messages never completed: what, which run, how many arrived, why."""
    run = f" (run {int(r.repeat) + 1})" if getattr(r, "repeat", None) is not None and r.repeat == r.repeat else ""
    return (f"{r.path} {style.bytes_label(r.size_bytes)}{run}: {int(r.delivered_messages)}/"
            f"{int(r.sent_messages)} delivered" + (f", {r.failure}" if getattr(r, "failure", "") else ""))


def _runs_text(rows: pd.DataFrame) -> str:
    """How many runs each plotted point is the median of: 'median of 3 runs a point (bars:
    min to max)', '2 to 3 runs' where runs were left out, 'one run a point' where all have one."""
    counts = rows.groupby(["path", "size_bytes", *(c for c in ("block_threads",) if c in rows)]).size()
    least, most = (int(counts.min()), int(counts.max())) if len(counts) else (0, 0)
    if most <= 1:
        return "one run a point"
    runs = f"{most}" if least == most else f"{least} to {most}"
    return f"median of {runs} runs a point (bars: min to max)"


# --- figure 1 ----------------------------------------------------------------------

@style.styled
def latency_vs_size(df: pd.DataFrame):
    """Zero-load latency (us) vs message size, one panel per topology, one line per path."""
    model = _select(df, backend="model", measure="latency")
    topologies = _topologies(model)
    ncols = 2 if len(topologies) > 1 else 1
    nrows = -(-len(topologies) // ncols)
    fig, axes = style.new_figure(nrows, ncols, height=2.3 * nrows + 0.5, sharex=True, sharey=True)
    for ax, topology in zip(axes.flat, topologies):
        here = model[model["topology"] == topology]
        for path in [p for p in style.PATH_STYLES if p in set(here["path"])]:
            rows = here[here["path"] == path]
            _line(ax, rows["size_bytes"], rows["latency_ns"] / 1e3, f"{path}|{topology}",
                  style.PATH_LABELS[path], **style.PATH_STYLES[path])
        ax.set_title(style.TOPOLOGY_LABELS.get(topology, topology))
        style.log_numbers(ax)
        style.bytes_axis(ax)
        ax.set_ylabel("latency (µs)")
    for ax in axes.flat[len(topologies):]:
        ax.set_visible(False)
    for ax in axes.flat:
        ax.label_outer()
    axes.flat[0].legend(loc="upper left")
    style.caveat(fig, (
        "Model, zero load, default parameters (gpuwrite model params: each value and its source). Every path "
        "streams per packet (cut-through at the NIC); push's packets leave as their bytes arrive, before the "
        "doorbell (nic.push_forwarding = on_arrival, an assumption: stored whole first, push loses from 64 KiB "
        "on one switch, Fig. 6). Push is faster because the NIC reads nothing: pull pays "
        "a WQE fetch and a payload read round trip, staged a copy plus a host-memory read. The gap scales with "
        "the read round trip: the assumed switch (150 ns) and derived root-complex (200 ns) latencies; the "
        "socket crossing (+107 ns per round trip) is pcie-bench's measurement."))
    return fig


# --- figure 2 ----------------------------------------------------------------------

EFFICIENCY_SERIES = (  # (label, operation, rcb_bytes, rcb_chunks)
    ("write (posted, MPS-sized TLPs)", "write", 64, False),
    ("read, completions of MPS", "read", 64, False),
    ("read, completions split at RCB 64", "read", 64, True),
    ("read, completions split at RCB 128", "read", 128, True),
)


@style.styled
def pcie_efficiency(df: pd.DataFrame):
    """PCIe efficiency (payload / wire bytes, payload direction) vs size, one panel per MPS."""
    rows = _select(df, backend="model", measure="efficiency")
    mps_values = sorted(rows["link.mps_bytes"].unique())
    fig, axes = style.new_figure(1, len(mps_values), height=3.0, sharey=True)
    for ax, mps in zip(axes.flat, mps_values):
        panel = rows[rows["link.mps_bytes"] == mps]
        for k, (label, operation, rcb, chunks) in enumerate(EFFICIENCY_SERIES):
            series = panel[(panel["operation"] == operation) & (panel["link.rcb_bytes"] == rcb)
                           & (panel["link.rcb_chunks"] == chunks)]
            if len(series):
                _line(ax, series["size_bytes"], series["efficiency"] * 100, f"{operation}-{rcb}-{chunks}|{mps}",
                      label, markevery=0.1, **style.SERIES_STYLES[k])
        example = panel[(panel["operation"] == "read") & (panel["size_bytes"] == 512)
                        & (panel["link.rcb_chunks"] == False)]  # noqa: E712 (a column of booleans)
        if mps == 256 and len(example):
            value = float(example["efficiency"].iloc[0]) * 100
            ax.plot([512], [value], linestyle="none", marker="*", markersize=11, color="black",
                    markerfacecolor="white", gid="example|256")
            ax.annotate(f"512 B read, 2 × 256 B\ncompletions: {value:.2f} %", (512, value),
                        xytext=(600, 63), fontsize=7, arrowprops={"arrowstyle": "->", "lw": 0.6})
        ax.set_title(f"MPS {mps} B")
        style.bytes_axis(ax, "transfer size")
        ax.set_ylim(60, 100)
        ax.label_outer()
    axes.flat[0].set_ylabel("efficiency (%)\npayload / wire bytes")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    style.caveat(fig, (
        "Model: byte accounting after pcie-bench (TLP framing and headers; ACK and UpdateFC DLLPs at the "
        "spec's recommended intervals; SKIP ordered sets). No completion exceeds MPS. Efficiency only: the "
        "time reads wait for their round trip is in Fig. 1 and in the read engine (Fig. 6)."), (handles, labels, 2))
    return fig


# --- figure 3 ----------------------------------------------------------------------

POLICY_STYLES = {"hold": style.SERIES_STYLES[0], "drop": style.SERIES_STYLES[1]}


def _stall_windows(ax, rows: pd.DataFrame, end_us: float) -> None:
    """Shade when the receiver stalls (hatched, so it shows in greyscale)."""
    period = float(rows["receiver.stall_period_ns"].iloc[0]) if "receiver.stall_period_ns" in rows else 0.0
    duration = float(rows["receiver.stall_duration_ns"].iloc[0]) if "receiver.stall_duration_ns" in rows else 0.0
    offset = float(rows["receiver.stall_offset_ns"].iloc[0]) if "receiver.stall_offset_ns" in rows else 0.0
    if period <= 0 or duration <= 0:
        return
    start, first = offset / 1e3, True
    while start < end_us:
        ax.axvspan(start, min(start + duration / 1e3, end_us), facecolor="0.92", edgecolor="0.7",
                   hatch=style.STALL_HATCH, linewidth=0, zorder=0, label="receiver stalled" if first else None)
        start += period / 1e3
        first = False


@style.styled
def buffer_under_stall(df: pd.DataFrame):
    """Staging occupancy and drops over time, and drops vs receive buffer, hold vs drop."""
    series = _select(df, backend="model", measure="simulate", output="timeseries")
    summary = _select(df, backend="model", measure="simulate", output="summary")
    fig, axes = style.new_figure(1, 3, height=2.7)
    occupancy, lost, drops = axes.flat
    end_us = float(series["time_ns"].max()) / 1e3 if len(series) else 0.0
    for ax in (occupancy, lost):
        _stall_windows(ax, series, end_us)
    for policy in [p for p in POLICY_STYLES if p in set(series.get("nic.policy", []))]:
        rows = series[series["nic.policy"] == policy]
        kwargs = {**POLICY_STYLES[policy], "markevery": max(1, len(rows) // 12)}
        _line(occupancy, rows["time_ns"] / 1e3, rows["staging_bytes"] / 1024, f"{policy}|occupancy",
              f"{policy}", **kwargs)
        _line(lost, rows["time_ns"] / 1e3, rows["dropped_bytes"] / 1024, f"{policy}|dropped",
              f"{policy}", **kwargs)
    occupancy.set(title="NIC staging occupancy", xlabel="time (µs)", ylabel="occupancy (KiB)")
    lost.set(title="bytes dropped (cumulative)", xlabel="time (µs)", ylabel="dropped (KiB)")
    for policy in [p for p in POLICY_STYLES if p in set(summary.get("nic.policy", []))]:
        rows = summary[summary["nic.policy"] == policy]
        _line(drops, rows["network.vl_buffer_bytes"], rows["dropped"] / rows["messages"] * 100,
              f"{policy}|drops", policy, **POLICY_STYLES[policy])
    style.bytes_axis(drops, "receiver's VL buffer")
    drops.set(title="drops vs receive buffer", ylabel="messages dropped (%)")
    handles, labels = occupancy.get_legend_handles_labels()
    style.caveat(fig, (
        "Simulated gpu_push. hold: the GPU reserves staging space per packet before writing it, so nothing is "
        "lost. drop: the naive NIC without a hold buffer, a cut-through FIFO of nic.fifo_bytes = 16 KiB (an "
        "assumption); a packet that overflows it while link credits are missing is lost with its message. How "
        "much drop loses rests on that FIFO size, the stall pattern and the VL buffer."), (handles, labels, 3))
    return fig


# --- figure 4 ----------------------------------------------------------------------

@style.styled
def throughput_vs_size(df: pd.DataFrame):
    """Saturated throughput vs size per path: the model, with GPU measurements overlaid."""
    model = _select(df, backend="model", measure="throughput")
    fig, axes = style.new_figure(1, 1, height=3.4)
    ax = axes[0, 0]
    for path in [p for p in style.PATH_STYLES if p in set(model["path"])]:
        rows = model[model["path"] == path]
        _line(ax, rows["size_bytes"], rows["throughput_gbps"], f"{path}|model",
              f"{path} (model)", **{**style.PATH_STYLES[path], "marker": None})
    measured = _select(gpu_rows(df), output="summary")
    if len(measured):
        # A run in which some messages never completed has no throughput to plot: say so.
        short = measured["delivered_messages"] < measured["sent_messages"]
        if short.any():
            style.note(ax, "Not plotted (incomplete runs):\n" + "\n".join(
                _incomplete_line(r) for r in measured[short].itertuples()), "lower right")
        measured = measured[~short]
    for device in sorted(set(measured["device"])) if len(measured) else ():
        for path in [p for p in style.PATH_STYLES if p in set(measured["path"])]:
            rows = measured[(measured["device"] == device) & (measured["path"] == path)]
            stl = style.PATH_STYLES[path]
            _line_with_runs(ax, rows, "throughput_gbps", f"{path}|{device}",
                            f"{path} (emulated, {device})", color=stl["color"], marker=stl["marker"],
                            linestyle=":", markerfacecolor="white", linewidth=0.8)
    if len(measured):
        # Why the emulated points sit far from the model's lines: they measure the software
        # NIC, not a PCIe link (issue 16).
        style.note(ax, "Emulated points sit below the model's lines: they measure the\n"
                   "software NIC (C threads that fetch every WQE and copy staging\n"
                   "to destination), over an unlimited link (no wire, no credits),\n"
                   "host_staged's second PCIe crossing unpaid (read as staging is),\n"
                   f"from {int(measured['n_qps'].max()) if 'n_qps' in measured else 'a few'} "
                   f"QPs, {_runs_text(measured)};\nthe model's lines are a saturated PCIe link.",
                   "lower right")
    if not len(measured):
        simulated = _select(df, backend="emulated", device=SIMULATOR_DEVICE)
        text = "No GPU measurements stored:\nmodel only."
        if len(simulated):
            ok = int((simulated["delivered_messages"] == simulated["sent_messages"]).sum())
            text += (f"\nCUDA-simulator functional check:\n{ok}/{len(simulated)} runs delivered every byte\n"
                     "(simulator timings not plotted).")
        style.note(ax, text, "lower left")
    style.bytes_axis(ax)
    style.log_numbers(ax)
    ax.set_ylabel("throughput (Gb/s)")
    handles, labels = ax.get_legend_handles_labels()
    style.caveat(fig, throughput_caveat(model), (handles, labels, 3))
    return fig


def throughput_caveat(model: pd.DataFrame) -> str:
    """What Fig. 4's lines model and the assumption their order rests on (the NIC's reads
    in flight), with the values of the parameters that made them."""
    from gpuwrite.model.params import Params

    nic, link = Params().nic, Params().link
    topologies = ", ".join(_topologies(model)) if len(model) and "topology" in model else "default topology"
    return (f"Lines: model, saturated ({topologies}), default parameters (gpuwrite model params: each value and "
            "its source); predictions, not measurements. Below 4 KiB each line is set by per-message overheads. "
            "host_staged's plateau below line rate and where nic_pull reaches it rest on the NIC's read engine: "
            f"nic.read_outstanding = {nic.read_outstanding} requests x MRRS {link.mrrs_bytes} B per read round "
            "trip, an assumption (fewer in flight lowers both, 256 lets both reach line rate; Fig. 6's bottom "
            "panel moves it). gpu_push reads nothing, so it does not depend on it.")


# --- figure 5 ----------------------------------------------------------------------

def _median_run(rows: pd.DataFrame):
    """(the run whose median latency is the median run's, [(repeat, rows) of the others])
    of one path's messages at one size: Fig. 5 draws the first in full and the others
    faint, so that one slow run shows as one and does not stand for the path. Rows
    without ``repeat`` (tables before three runs a curve) are one run."""
    if "repeat" not in rows or rows["repeat"].nunique() <= 1:
        return rows, []
    runs = sorted(rows.groupby("repeat"), key=lambda kr: float(kr[1]["latency_ns"].median()))
    middle = (len(runs) - 1) // 2
    return runs[middle][1], [(int(k), r) for i, (k, r) in enumerate(runs) if i != middle]


@style.styled
def latency_cdf(df: pd.DataFrame):
    """CDF of per-message latency measured on a GPU in emulated mode, one panel per size."""
    measured = _select(gpu_rows(df), output="latencies")
    if not len(measured):
        return _no_gpu_figure()
    sizes = sorted(measured["size_bytes"].unique())
    fig, axes = style.new_figure(1, len(sizes), height=2.8, sharey=True)
    for ax, size in zip(axes.flat, sizes):
        panel = measured[measured["size_bytes"] == size]
        for device in sorted(set(panel["device"])):
            for path in [p for p in style.PATH_STYLES if p in set(panel["path"])]:
                runs = panel[(panel["device"] == device) & (panel["path"] == path)]
                main, others = _median_run(runs)
                for k, rows in others:
                    latency_us = np.sort(rows["latency_ns"].to_numpy(dtype=float)) / 1e3
                    ax.step(latency_us, np.arange(1, len(latency_us) + 1) / len(latency_us),
                            where="post", gid=f"{path}|{size}|{device}|run {k + 1}", alpha=0.35,
                            linewidth=0.8, color=style.PATH_STYLES[path].get("color"))
                latency_us = np.sort(main["latency_ns"].to_numpy(dtype=float)) / 1e3
                fraction = np.arange(1, len(latency_us) + 1) / len(latency_us)
                ax.step(latency_us, fraction, where="post", label=path, gid=f"{path}|{size}|{device}",
                        markevery=max(1, len(latency_us) // 8), **style.PATH_STYLES[path])
        style.log_numbers(ax, "x")
        ax.set_title(f"{style.bytes_label(size)} messages, {', '.join(sorted(set(panel['device'])))}")
        ax.set_xlabel("latency, post to completion (µs)")
    axes.flat[0].set_ylabel("fraction of messages")
    axes.flat[0].legend(loc="lower right")
    return fig


# --- figure 9: emulated latency vs size ---------------------------------------------

def newest_calibration(folder=None, devices=None) -> dict | None:
    """The newest calibration TOML's floor (us), bulk-store ceiling (GB/s), device and
    file name, and the push's least by (size, block) where the file has it (since session
    36), of one of ``devices`` where given, or None where none is stored (``gpuwrite
    calibrate`` writes them)."""
    import tomllib
    from pathlib import Path

    folder = Path(folder) if folder else calibration_dir()
    for f in newest_first(folder):
        data = tomllib.loads(f.read_text())
        m = data.get("measurements", {})
        device = data.get("device", {}).get("name", "?")
        if devices is not None and device not in devices:
            continue
        if "doorbell_pingpong" in m and "bulk_store_to_host" in m:
            return {"floor_us": float(m["doorbell_pingpong"]["value"]),
                    "ceiling_gbytes": float(m["bulk_store_to_host"]["value"]),
                    "device": data.get("device", {}).get("name", "?"), "file": f.name,
                    "push_least": {(int(p["size_bytes"]), int(p["block_threads"])):
                                   float(p["least_us"])
                                   for p in data.get("push_least_vs_size", [])}}
    return None


@style.styled
def emulated_latency_vs_size(df: pd.DataFrame, calibration: dict | None = None):
    """p50 latency vs size per path measured on a GPU (one panel per threads per block),
    with the physical line floor + size / ceiling from the newest calibration."""
    measured = _select(gpu_rows(df), output="summary")
    incomplete = measured.iloc[0:0]
    if len(measured):
        short = measured["delivered_messages"] < measured["sent_messages"]
        measured, incomplete = measured[~short], measured[short]
    if not len(measured):
        return _no_gpu_figure()
    devices = sorted(set(measured["device"]))
    # The physical line of the device measured, never another's.
    cal = calibration if calibration is not None else newest_calibration(devices=devices)
    threads = sorted(measured["block_threads"].unique(), reverse=True)
    fig, axes = style.new_figure(1, len(threads), height=3.4, sharey=True)
    for ax, th in zip(axes.flat, threads):
        panel = measured[measured["block_threads"] == th]
        for path in [p for p in style.PATH_STYLES if p in set(panel["path"])]:
            rows = panel[panel["path"] == path]
            _line_with_runs(ax, rows, "latency_p50_us", f"{path}|{th}", path, **style.PATH_STYLES[path])
        if cal:
            sizes = np.geomspace(panel["size_bytes"].min(), panel["size_bytes"].max(), 32)
            _line(ax, sizes, cal["floor_us"] + sizes / (cal["ceiling_gbytes"] * 1e3),
                  f"physical|{th}", "floor + size / bulk-store ceiling", color="black",
                  linestyle="--", linewidth=0.9)
            least = {n: us for (n, t), us in (cal.get("push_least") or {}).items() if t == th}
            if least:
                _line(ax, list(least), list(least.values()), f"push_least|{th}",
                      "gpu_push's least: its stores and their ordering",
                      color=style.PATH_STYLES["gpu_push"].get("color", "black"), linestyle=":",
                      marker="x", linewidth=0.9)
        style.bytes_axis(ax)
        style.log_numbers(ax)
        ax.set_title(f"{int(th)} threads per block")
    axes.flat[0].set_ylabel("p50 latency, post to completion (µs)")
    source = (f"Dashed: floor {cal['floor_us']:.2f} us + size / {cal['ceiling_gbytes']:.1f} GB/s "
              f"(calibration {cal['file']})." + (
                  " Dotted: gpu_push's least, the floor's ping-pong after the stores a push "
                  "of that size orders before its doorbell (header, WQE, payload from "
                  "registers, by the threads its kernel uses), the fastest of the "
                  "calibration's runs: what is above it is gpuwrite's bookkeeping, the "
                  "engine and the payload's reads." if cal.get("push_least") else "")
              if cal else
              f"No calibration of {', '.join(devices)} stored: physical line not drawn.")
    if len(incomplete):
        # A run in which messages never completed has no latency to plot: say which and why.
        style.note(axes.flat[-1], "Not plotted (incomplete runs):\n" + "\n".join(
            _incomplete_line(r) + f", {int(r.block_threads)} threads" for r in incomplete.itertuples()),
            "upper left")
    # Under the axes, not over them: a note inside the panel hid the largest sizes' points.
    handles, labels = axes.flat[0].get_legend_handles_labels()
    runs = _runs_text(measured)
    style.caveat(fig, f"Emulated on {', '.join(devices)}: software NIC (C thread), staging in host "
                 "memory, nic_pull answered by a GPU pull agent, unlimited link. The wire is stood "
                 "in for by the engine's copy of each WQE to its destination after the doorbell "
                 "(one CPU core below 32 KiB), which from 4 KiB costs more than a 400 Gb/s wire "
                 "would (gpuwrite bench measures by how much: stand_in) and above ~16 KiB "
                 "dominates. host_staged's second PCIe "
                 "crossing (the NIC's read of its bounce ring) costs nothing here: the engine "
                 "delivers from the ring as from gpu_push's staging. "
                 f"{runs[:1].upper()}{runs[1:]}. "
                 + source, (handles, labels, 5))
    return fig


# --- figure 6 ----------------------------------------------------------------------

def push_margin(df: pd.DataFrame, measure: str) -> pd.DataFrame:
    """gpu_push's margin over the best other path (%), topology x size; > 0 where push wins.

    Latency: best other latency / push latency - 1. Throughput: push / best other - 1.
    The ``winner`` table beside it names the best path.
    """
    column = "latency_ns" if measure == "latency" else "throughput_gbps"
    rows = _select(df, backend="model", measure=measure)
    table = rows.pivot_table(index=["topology", "size_bytes"], columns="path", values=column, aggfunc="first")
    others = table.drop(columns="gpu_push")
    if measure == "latency":
        margin = (others.min(axis=1) / table["gpu_push"] - 1) * 100
        winner = table.idxmin(axis=1)
    else:
        margin = (table["gpu_push"] / others.max(axis=1) - 1) * 100
        winner = table.idxmax(axis=1)
    return pd.DataFrame({"margin_pct": margin, "winner": winner}).reset_index()


TIE_PCT = 0.5   # margins smaller than this are ties (e.g. both paths at network line rate)
SHORT = {"nic_pull": "pull", "host_staged": "staged", "gpu_push": "push", "gpu_push_inline": "inline"}


PUSH_MAP_CAVEAT = (
    "Model (gpuwrite model params lists every value and its source). Latency: push wins because the NIC "
    "reads nothing; the margin grows with the read round trip, i.e. with the assumed switch (150 ns) and "
    "derived root-complex (200 ns) latencies; the socket penalty (+107 ns per round trip) is pcie-bench's. "
    "From 16 KiB it also rests on the push NIC forwarding each packet as its bytes arrive, before the "
    "doorbell behind the payload (nic.push_forwarding = on_arrival, an assumption: the NIC tracks the "
    "staging lines it receives). The third panel stores each message whole first (after_doorbell, as the "
    "emulated NIC does; a 2 MiB staging buffer so that 1 MiB fits): push then loses to nic_pull from 64 KiB "
    "on one switch and to host_staged from 256 KiB across the root complex. "
    "Throughput: every path streams per packet through the 256 KiB VL buffer, so at large sizes all reach "
    "the 400 Gb/s line rate unless PCIe reads are slower; pull's and staged's loss across the root complex "
    "comes from the NIC's read engine (nic.read_outstanding = 64 requests x MRRS 512 B per round trip, an "
    "assumption) and, when set, a platform P2P read cap (off by default). The bottom panel moves both: the "
    "margin follows the reads in flight; a P2P cap moves nothing here because the best other path across a "
    "root complex is host_staged, whose reads of host memory are not peer-to-peer.")


# Fig. 6's maps: (sweep, measure, panel title), drawn where the table has the sweep.
PUSH_MAPS = (
    ("latency", "latency", "zero-load latency: gpu_push vs the best other path"),
    ("throughput", "throughput", "saturated throughput: gpu_push vs the best other path"),
    ("latency_after_doorbell", "latency",
     "zero-load latency, the NIC forwarding a push only after its doorbell (nic.push_forwarding)"),
)


def _margin_map(fig, ax, grid, winners, title, xlabels, ylabels, gid):
    """One heat map of push margins: colour by margin, losses hatched and the winner named."""
    values = grid.to_numpy(dtype=float)
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    vmin, vmax = min(0.0, low), max(1.0, high)     # no colour-bar half that no cell uses
    image = ax.imshow(values, cmap=style.MAP_CMAP, vmin=vmin, vmax=vmax, aspect="auto", gid=gid)
    losses = False
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            value = values[i, j]
            if abs(value) < TIE_PCT:
                text = "tie"
            elif value > 0:
                text = f"{value:+.0f}%"
            else:
                text = f"{value:+.0f}%\n{SHORT.get(winners.iloc[i, j], '?')}"
            shade = image.cmap(image.norm(value))
            light = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] > 0.5
            ax.text(j, i, text, ha="center", va="center", fontsize=6, color="black" if light else "white")
            if value <= -TIE_PCT:
                losses = True
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch=style.LOSS_HATCH,
                                       edgecolor="0.5", linewidth=0))
    ax.set_xticks(range(len(xlabels)), xlabels, rotation=45, ha="right")
    ax.set_yticks(range(len(ylabels)), ylabels)
    ax.grid(False)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="push margin (%)", shrink=0.9)
    if losses:
        ax.legend(handles=[Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="0.5", hatch=style.LOSS_HATCH,
                                     label="push loses (the winner is named)")],
                  loc="upper right", bbox_to_anchor=(1.0, -0.46), fontsize=6.5)


@style.styled
def push_wins_map(df: pd.DataFrame):
    """Where gpu_push wins: topology x size, coloured by its margin, losses hatched and named;
    then the throughput margin's sensitivity to the read engine and the P2P read cap."""
    maps = [(name, measure, title) for name, measure, title in PUSH_MAPS
            if len(_select(df, backend="model", measure=measure, sweep=name))]
    sensitivity = _select(df, backend="model", measure="throughput", sweep="sensitivity")
    panels = len(maps) + (1 if len(sensitivity) else 0)
    fig, axes = style.new_figure(panels, 1, height=2.3 * panels + 0.6)
    for ax, (name, measure, title) in zip(axes.flat, maps):
        margins = push_margin(_select(df, sweep=name), measure)
        topologies = _topologies(margins)
        sizes = sorted(margins["size_bytes"].unique())
        grid = margins.pivot(index="topology", columns="size_bytes", values="margin_pct").loc[topologies, sizes]
        winners = margins.pivot(index="topology", columns="size_bytes", values="winner").loc[topologies, sizes]
        _margin_map(fig, ax, grid, winners, title,
                    [style.bytes_label(s) for s in sizes], [style.TOPOLOGY_LABELS.get(t, t) for t in topologies],
                    f"margin|{name}")
        ax.set_xlabel("message size (bytes)")
    if len(sensitivity):
        ax = axes.flat[len(maps)]
        rows = sensitivity.copy()
        rows["case"] = list(zip(rows["nic.read_outstanding"], rows["platform.p2p_read_cap_gbps"]))
        table = rows.pivot_table(index="case", columns="path", values="throughput_gbps", aggfunc="first")
        margin = (table["gpu_push"] / table.drop(columns="gpu_push").max(axis=1) - 1) * 100
        winner = table.idxmax(axis=1)
        outstanding = sorted(rows["nic.read_outstanding"].unique())
        caps = sorted(rows["platform.p2p_read_cap_gbps"].unique(), key=lambda c: (c == 0, -c))
        grid = pd.DataFrame([[margin[(o, c)] for c in caps] for o in outstanding])
        winners = pd.DataFrame([[winner[(o, c)] for c in caps] for o in outstanding])
        size = int(rows["size_bytes"].iloc[0])
        topology = style.TOPOLOGY_LABELS.get(rows["topology"].iloc[0], rows["topology"].iloc[0])
        _margin_map(fig, ax, grid, winners,
                    f"throughput at {style.bytes_label(size)}, {topology}: sensitivity to the read assumptions",
                    ["no cap" if c == 0 else f"{c:g} Gb/s" for c in caps],
                    [f"{int(o)} x {style.bytes_label(512)}" for o in outstanding], "margin|sensitivity")
        ax.set_xlabel("platform P2P read cap (platform.p2p_read_cap_gbps)")
        ax.set_ylabel("NIC reads in flight")
    style.caveat(fig, PUSH_MAP_CAVEAT)
    return fig


# --- figure 7 ----------------------------------------------------------------------

BUFFER_CAVEAT = (
    "Simulated gpu_push with hold, one QP, 4 KiB messages, closed loop. The GPU reserves staging space "
    "per packet and sees it freed one posted write and one poll (gpu.poll_interval_ns = 150 ns, from the "
    "calibration's dependent load) after the packet left; lines: the closed form of gpuwrite.model.buffer "
    "(Little's law on the staging loop), from the same parameters. With stalls, the buffer that keeps a GPU "
    "offering a share of line rate from ever waiting adds X (D + Lc) - V to it (`gpuwrite model buffer "
    "--check` verifies it in the simulator). How much buffer a share of line rate needs rests on the feedback "
    "delay, the path's PCIe latencies, and under stalls on the receiver's 256 KiB VL buffer and stall pattern.")


@style.styled
def throughput_vs_buffer(df: pd.DataFrame):
    """Sustained throughput vs staging buffer size per topology: simulated points, closed-form lines."""
    from gpuwrite.model import buffer
    from gpuwrite.model.params import Params

    panels = [name for name in ("steady", "stalls") if len(_select(df, sweep=name, output="summary"))]
    fig, axes = style.new_figure(len(panels), 1, height=2.5 * len(panels) + 0.5, sharex=True)
    for ax, name in zip(axes.flat, panels):
        rows = _select(df, sweep=name, output="summary")
        for topology in _topologies(rows):
            here = rows[rows["topology"] == topology]
            stl = style.SERIES_STYLES[list(PRESETS).index(topology) % len(style.SERIES_STYLES)]
            label = style.TOPOLOGY_LABELS.get(topology, topology)
            _line(ax, here["nic.staging_buffer_bytes"], here["throughput_gbps"], f"{topology}|{name}|simulated",
                  f"{label} (simulated)", color=stl["color"], marker=stl["marker"], linestyle="none")
            first = here.iloc[0]
            params = Params(topology=topology)
            if name == "stalls":
                params = params.updated({"receiver": {"stall_period_ns": float(first["receiver.stall_period_ns"]),
                                                      "stall_duration_ns": float(first["receiver.stall_duration_ns"])}})
            size = int(first["workload.size_bytes"]) if "workload.size_bytes" in here else 4096
            if name == "steady":
                need = buffer.need(params, 0.5, size)
                sizes = np.geomspace(float(here["nic.staging_buffer_bytes"].min()),
                                     float(here["nic.staging_buffer_bytes"].max()), 200)
                packets = np.floor(sizes / need.packet_staged_bytes)
                closed = np.minimum(need.max_gbps, packets * need.packet_payload_bytes * 8.0 / need.staging_loop_ns)
                _line(ax, sizes, closed, f"{topology}|{name}|closed form", f"{label} (closed form)",
                      color=stl["color"], linestyle=stl["linestyle"], marker=None, linewidth=1.0)
        ax.set_ylabel("throughput (Gb/s)")
        ax.set_title("steady receiver: buffered packets x 4 KiB / staging loop, up to line rate" if name == "steady"
                     else "receiver stalls 20 µs in every 80 µs (the closed loop catches up between stalls)")
        style.bytes_axis(ax, "NIC staging buffer")
        ax.legend(loc="lower right", fontsize=6.5, ncol=2 if name == "steady" else 1)
        ax.label_outer()
    style.caveat(fig, BUFFER_CAVEAT)
    return fig


# --- figure 8: the validation table ---------------------------------------------------

VALIDATION_HEADER = ["machine", "quantity", "size", "measured", "model", "unit", "error %", "within 10 %",
                     "link-bound Gb/s"]
MISS_COLOUR = "#f4d6d6"
TABLE_FONT_PT = 5.5      # the cells' size, smaller only where the widest cells would not fit the page
TABLE_PAD_PT = 2.0       # blank between a cell's border and its text


def _validation_cells(frame: pd.DataFrame, link_rate: dict) -> tuple[list[list[str]], list[list[str]]]:
    """The text and the colour of each cell, one row per comparison of ``frame``."""
    cells, colours = [], []
    for row in frame.itertuples():
        size = "bulk" if row.size_bytes is None or pd.isna(row.size_bytes) else f"{int(row.size_bytes)} B"
        link = link_rate.get(row.size_bytes) if row.unit == "Gb/s" else None
        verdict = {True: "yes", False: "NO"}.get(row.within_goal, "fitted" if row.kind == "fitted" else "< 256 B")
        cells.append([row.machine, row.quantity, size, f"{row.measured:,.1f}", f"{row.model:,.1f}", row.unit,
                      f"{row.error_pct:+.1f}", verdict, "" if link is None else f"{link:.1f}"])
        colours.append([MISS_COLOUR if verdict == "NO" else "white"] * len(VALIDATION_HEADER))
    return cells, colours


def _two_lines(label: str) -> str:
    """``label`` broken at the space nearest its middle (a header wider than its column's cells)."""
    spaces = [i for i, ch in enumerate(label) if ch == " "]
    if not spaces:
        return label
    cut = min(spaces, key=lambda i: abs(2 * i - len(label)))
    return label[:cut] + "\n" + label[cut + 1:]


def _text_width(path) -> float:
    """A path's width in its units (its vertices' span: for curves a little over, never under)."""
    vertices = path.vertices
    return float(vertices[:, 0].max() - vertices[:, 0].min()) if len(vertices) else 0.0


def _draw_cell_table(ax, header: list[str], cells: list[list[str]], colours: list[list[str]], gid: str):
    """``cells`` (rows of strings) under ``header``, filling ``ax``; each cell's background
    from ``colours`` (rows of matplotlib colours, as ``cells``).

    Drawn with few artists: the backgrounds and borders one ``pcolormesh`` of an RGBA array
    (gid ``<gid>|colours``, row 0 the header), each string shown in several cells one
    ``PathCollection`` of its glyph outlines (``TextPath``) stamped at each of them, the
    strings shown once one more (gid ``<gid>|text``; offsets: a cell's left edge, its row's
    middle), the header ``Text`` (gid ``<gid>|header``). Columns are fractions of the axes'
    width, rows data units down from the top (the header two), so text and colours stay
    aligned whatever the layout does. Returns the mesh.
    """
    # Why not ax.table: matplotlib's Table measures each cell's text about 20 times per save;
    # for Fig. 8's ~7,100 cells saving PNG and PDF took about 60 s of CPU (measured). And why
    # outlines rather than a Text per column: rasterising text costs about 0.1 ms a glyph
    # (matplotlib 3.11, measured), ~20 s for the table's ~68,000 glyphs; an outline is
    # rasterised once per distinct string, and the PDF holds it once. The price: the cells'
    # text is not selectable in the PDF (the header and caveat are).
    from matplotlib import rcParams
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_rgba_array
    from matplotlib.font_manager import FontProperties
    from matplotlib.path import Path
    from matplotlib.textpath import TextPath
    from matplotlib.transforms import Affine2D

    fig = ax.get_figure()
    n_rows, n_cols = len(cells), len(header)
    prop = FontProperties(size=TABLE_FONT_PT)     # rcParams' family, as ax.table's cells had

    def outline(text):
        return TextPath((0, 0), text, size=TABLE_FONT_PT, prop=prop)

    outlines = {text: outline(text) for text in dict.fromkeys(t for row in cells for t in row) if text}
    widest = [max([_text_width(outlines[row[j]]) for row in cells if row[j]], default=0.0) for j in range(n_cols)]
    labels = [label if _text_width(outline(label)) <= widest[j] else _two_lines(label)
              for j, label in enumerate(header)]
    widest = [max([wide] + [_text_width(outline(line)) for line in label.split("\n")])
              for wide, label in zip(widest, labels)]
    # the axes' width (the figure's less constrained layout's pads), with a margin: the font
    # shrinks where the widest cells would not fit it
    room_pt = 0.97 * (fig.get_figwidth() - 2 * rcParams["figure.constrained_layout.w_pad"]) * 72
    scale = min(1.0, (room_pt - 2 * TABLE_PAD_PT * n_cols) / sum(widest))
    need = np.array(widest) * scale + 2 * TABLE_PAD_PT
    edges_x = np.concatenate([[0.0], np.cumsum(need) / need.sum()])
    edges_y = np.concatenate([[0.0], np.arange(2, n_rows + 3, dtype=float)])

    rgba = to_rgba_array(["white"] * n_cols + [c for row in colours for c in row]).reshape(n_rows + 1, n_cols, 4)
    mesh = ax.pcolormesh(edges_x, edges_y, rgba, edgecolors="black", linewidth=0.4, gid=f"{gid}|colours")
    mesh.set_in_layout(False)          # inside the axes: nothing for the layout to measure
    mesh.set_clip_on(False)            # the outer borders lie on the axes' edges: whole, not halved

    # Outlines in points, at the font's size, centred on a digit's middle, as polygons (curves
    # flattened at 1/16 pt): matplotlib finds a curved path's extents in Python before each
    # draw, ~5 ms a string.
    digit = outline("0").get_extents()
    place = Affine2D().scale(scale / 16).translate(TABLE_PAD_PT, -scale * (digit.y0 + digit.y1) / 2)
    shapes = {text: place.transform_path(Path.make_compound_path(*map(Path, path.to_polygons(Affine2D().scale(16)))))
              for text, path in outlines.items()}
    anchors = {}
    for i, row in enumerate(cells):
        for j, text in enumerate(row):
            if text:
                anchors.setdefault(text, []).append((edges_x[j], i + 2.5))
    groups = [([shapes[text]], where) for text, where in anchors.items() if len(where) > 1]
    once = [text for text, where in anchors.items() if len(where) == 1]
    if once:
        groups.append(([shapes[text] for text in once], [anchors[text][0] for text in once]))
    points = Affine2D().scale(1 / 72) + fig.dpi_scale_trans
    for paths, offsets in groups:
        stamp = PathCollection(paths, offsets=offsets, offset_transform=ax.transData, transform=points,
                               facecolors="black", edgecolors="face", linewidths=0, gid=f"{gid}|text")
        stamp.set_in_layout(False)
        ax.add_collection(stamp, autolim=False)
    for j, label in enumerate(labels):
        ax.text((edges_x[j] + edges_x[j + 1]) / 2, 1.0, label, ha="center", va="center",
                fontsize=TABLE_FONT_PT * scale, linespacing=1.1, gid=f"{gid}|header").set_in_layout(False)
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(n_rows + 2, 0.0)
    ax.set_axis_off()
    return mesh


@style.styled
def validation_table(df: pd.DataFrame):
    """The model against measurements (gpuwrite.model.validation), as a table.

    Its rows come from the measurement files the validation module reads (pcie-bench's
    published data, this project's calibrate files); the stored sweep is the PCIe
    accounting's link-bound read rate at pcie-bench's sizes, printed beside them.
    """
    from gpuwrite.model import validation

    frame = validation.table()
    link_rows = _select(df, backend="model", measure="efficiency")
    link_rate = dict(zip(link_rows["size_bytes"], link_rows["effective_rate_gbps"])) if len(link_rows) else {}
    cells, colours = _validation_cells(frame, link_rate)
    fig, axes = style.new_figure(1, 1, height=0.19 * len(cells) + 1.0)
    _draw_cell_table(axes[0, 0], VALIDATION_HEADER, cells, colours, gid="validation")
    style.caveat(fig, validation.summary(frame) + ". Sources: pcie-bench/data (Neugebauer et al., SIGCOMM 2018) "
                 "NFP6000 on a Xeon E5-2630v4, one parameter set (gpuwrite/model/validation_data/"
                 "nfp6000_e5-2630v4.toml, four constants fitted on the marked rows); this project's calibrate "
                 "files (experiments/calibration/). 'fitted' rows define a parameter and are not tests.")
    return fig


FIGURES = {
    "latency_vs_size": latency_vs_size,
    "pcie_efficiency": pcie_efficiency,
    "buffer_under_stall": buffer_under_stall,
    "throughput_vs_size": throughput_vs_size,
    "latency_cdf": latency_cdf,
    "push_wins_map": push_wins_map,
    "throughput_vs_buffer": throughput_vs_buffer,
    "validation_table": validation_table,
    "emulated_latency_vs_size": emulated_latency_vs_size,
}
