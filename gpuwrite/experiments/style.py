"""One look for every figure: fonts, sizes, and series that stay apart in greyscale.

Every series differs from its neighbours in marker and line style, not only in colour
(Okabe-Ito colours, which also survive colour blindness); maps use cividis, whose
lightness grows monotonically, and hatch what the colour alone would say.
"""
from __future__ import annotations

import functools

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

RC = {
    "font.size": 8.5, "axes.titlesize": 9, "axes.labelsize": 8.5, "legend.fontsize": 7.5,
    "xtick.labelsize": 7.5, "ytick.labelsize": 7.5, "axes.grid": True, "grid.alpha": 0.3,
    "grid.linewidth": 0.5, "axes.spines.top": False, "axes.spines.right": False,
    "lines.linewidth": 1.4, "lines.markersize": 4.5, "legend.frameon": False,
    "pdf.fonttype": 42, "ps.fonttype": 42, "hatch.linewidth": 0.6,
}
DPI = 150

PATH_STYLES = {
    "nic_pull": {"color": "#0072B2", "marker": "o", "linestyle": "-"},
    "host_staged": {"color": "#D55E00", "marker": "s", "linestyle": "--"},
    "gpu_push": {"color": "#009E73", "marker": "^", "linestyle": "-."},
    "gpu_push_inline": {"color": "#CC79A7", "marker": "D", "linestyle": ":"},
}
PATH_LABELS = {
    "nic_pull": "nic_pull (NIC reads GPU memory)",
    "host_staged": "host_staged (bounce via host)",
    "gpu_push": "gpu_push (GPU writes to NIC)",
    "gpu_push_inline": "gpu_push_inline (payload in WQE)",
}
# Other series (read/write, hold/drop, ...): taken in order.
SERIES_STYLES = (
    {"color": "#000000", "marker": "o", "linestyle": "-"},
    {"color": "#E69F00", "marker": "s", "linestyle": "--"},
    {"color": "#56B4E9", "marker": "^", "linestyle": ":"},
    {"color": "#CC79A7", "marker": "D", "linestyle": "-."},
    {"color": "#009E73", "marker": "v", "linestyle": (0, (5, 1, 1, 1, 1, 1))},
)
TOPOLOGY_LABELS = {
    "same_switch": "same switch (PIX)",
    "across_switches": "across switches (PXB)",
    "across_root_ports": "across root ports (PHB)",
    "across_sockets": "across sockets (SYS)",
}
MAP_CMAP = "cividis"
LOSS_HATCH = "xxx"
STALL_HATCH = "////"


def styled(draw):
    """Runs a figure function inside the common style."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(RC):
            return draw(*args, **kwargs)
    return wrapper


WIDTH_IN = 6.8  # a two-column paper's text width


def new_figure(nrows: int = 1, ncols: int = 1, height: float | None = None, **subplots):
    """A Figure (no pyplot state), the paper's width, and a 2-D array of its axes."""
    fig = Figure(figsize=(WIDTH_IN, height or 2.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **subplots)
    return fig, axes


def bytes_label(value: float) -> str:
    """64 -> '64 B', 4096 -> '4 KiB', 1048576 -> '1 MiB'."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            number = value / scale
            return f"{number:g} {unit}"
    return f"{value:g} B"


def bytes_axis(ax, label: str = "message size") -> None:
    """The x axis as sizes: log 2, ticks every factor of 4, labelled with units."""
    ax.set_xscale("log", base=2)
    axis = ax.xaxis
    axis.set_major_locator(LogLocator(base=4))
    axis.set_major_formatter(FuncFormatter(lambda value, _: bytes_label(value)))
    axis.set_minor_formatter(NullFormatter())
    axis.set_label_text(f"{label} (bytes)")


def log_numbers(ax, which: str = "y") -> None:
    """A log axis labelled with plain numbers (1, 10, 100) rather than powers of ten.

    Majors at 1, 2, 5 x 10^k; when the visible range is narrower than a factor of 5 (a
    plateau, e.g. 300-450 Gb/s, holds no such tick) the minor ticks at 1..9 x 10^k are
    labelled too, so a log axis never ends up with no number on it.
    """
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    # numticks: without it matplotlib thins a wide range down to no labelled tick at all
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=30))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_locator(LogLocator(base=10, subs=(1.5, 3.0, 4.0, 6.0, 7.0, 8.0, 9.0), numticks=30))

    def minor(value, _):
        low, high = sorted(axis.get_view_interval())
        return f"{value:g}" if low > 0 and high / low < 5 else ""

    axis.set_minor_formatter(FuncFormatter(minor))


CAVEAT_CHARS_PER_LINE = 165   # at 6.5 pt across the paper's width


def caveat(fig, text: str, legend: tuple | None = None) -> None:
    """What the figure models and which assumption its conclusion rests on, printed under
    the figure in a band that constrained layout leaves free. ``legend`` (handles, labels,
    columns): a figure legend placed between the axes and that band."""
    lines = -(-len(text) // CAVEAT_CHARS_PER_LINE)
    height = fig.get_figheight()
    band = (lines * 0.115 + 0.06) / height
    bottom = band
    if legend is not None:
        handles, labels, ncol = legend
        bottom += (-(-len(labels) // ncol) * 0.17 + 0.05) / height
        fig.legend(handles, labels, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, band),
                   bbox_transform=fig.transFigure)
    fig.get_layout_engine().set(rect=(0.0, bottom, 1.0, 1.0 - bottom))
    fig.text(0.01, band, text, ha="left", va="top", fontsize=6.5, wrap=True, color="0.25", gid="caveat")


def note(ax, text: str, loc: str = "lower right") -> None:
    """A boxed note inside the axes, e.g. what is and is not measured."""
    positions = {"lower right": (0.98, 0.03, "right", "bottom"), "upper left": (0.02, 0.97, "left", "top"),
                 "center": (0.5, 0.5, "center", "center"), "upper right": (0.98, 0.97, "right", "top"),
                 "lower left": (0.02, 0.03, "left", "bottom")}
    x, y, ha, va = positions[loc]
    ax.text(x, y, text, transform=ax.transAxes, ha=ha, va=va, fontsize=7, wrap=True,
            bbox={"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": "0.6", "linewidth": 0.5},
            gid="note")
