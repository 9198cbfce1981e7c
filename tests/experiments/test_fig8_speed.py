"""Fig. 8's table is drawn faster (figures._fast_table) without a pixel or a byte changing:
its cells' extents are looked up, not recomputed, and the pass before drawing places the
cells without drawing them."""
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.table import Cell, Table

from gpuwrite.experiments import figures, render, style


def _table_figure(rows: int, fast: bool):
    """A small table made as validation_table makes Fig. 8's (same calls, a caveat under it)."""
    cells = [[f"machine {r % 3}", f"quantity {r}", f"{64 << (r % 6)} B", f"{1000.0 / (r + 1):,.1f}",
              f"{1000.0 / (r + 1.3):,.1f}", "ns" if r % 2 else "Gb/s", f"{(r - 4) * 1.7:+.1f}",
              "NO" if r % 4 == 0 else "yes", "" if r % 3 else f"{r * 1.5:.1f}"] for r in range(rows)]
    colours = [["#f4d6d6" if row[7] == "NO" else "white"] * 9 for row in cells]

    @style.styled
    def make():
        fig, axes = style.new_figure(1, 1, height=0.19 * rows + 1.0)
        ax = axes[0, 0]
        ax.set_axis_off()
        shown = ax.table(cellText=cells, cellColours=colours, loc="upper center", cellLoc="left",
                         colLabels=[f"column {i}" for i in range(9)],
                         colWidths=[0.25, 0.24, 0.06, 0.08, 0.08, 0.06, 0.07, 0.07, 0.09])
        shown.auto_set_font_size(False)
        shown.set_fontsize(5.5)
        shown.scale(1.0, 0.9)
        shown.set_gid("validation")
        if fast:
            figures._fast_table(shown)
        style.caveat(fig, "A caveat long enough to wrap over more than one line under the table. " * 4)
        return fig, shown
    return make()


def test_fast_cells_extents_are_matplotlibs_bit_for_bit():
    fig, shown = _table_figure(25, fast=True)
    assert isinstance(shown, figures._FastTable)
    renderer = FigureCanvasAgg(fig).get_renderer()
    # several placements of the axes (as constrained layout and savefig move them), twice
    # each so the second time comes from the memo
    for position in ([0.1, 0.1, 0.8, 0.8], [0.013, -0.2, 0.97, 1.31], [0.1, 0.1, 0.8, 0.8]):
        fig.axes[0].set_position(position)
        for _ in range(2):
            shown._update_positions(renderer)
            for cell in shown.get_celld().values():
                assert isinstance(cell, figures._FastCell)
                mine = cell.get_window_extent(renderer).get_points()
                theirs = Cell.get_window_extent(cell, renderer).get_points()
                assert np.array_equal(mine, theirs) and mine.tobytes() == theirs.tobytes()
            assert np.array_equal(shown.get_window_extent(renderer).get_points(),
                                  Table.get_window_extent(shown, renderer).get_points())
            assert np.array_equal(shown._get_grid_bbox(renderer).get_points(),
                                  Table._get_grid_bbox(shown, renderer).get_points())


def test_a_rotated_cell_falls_back_to_matplotlib():
    fig, shown = _table_figure(3, fast=True)
    cell = shown[1, 1]
    cell.angle = 30.0
    renderer = FigureCanvasAgg(fig).get_renderer()
    assert np.array_equal(cell.get_window_extent(renderer).get_points(),
                          Cell.get_window_extent(cell, renderer).get_points())


def test_the_saved_files_are_the_same_bytes(tmp_path):
    plain, _ = _table_figure(40, fast=False)
    fast, _ = _table_figure(40, fast=True)
    for fmt_path_a, fmt_path_b in zip(render.save(plain, tmp_path / "plain", "t"),
                                      render.save(fast, tmp_path / "fast", "t")):
        assert fmt_path_a.read_bytes() == fmt_path_b.read_bytes(), fmt_path_a.suffix


@pytest.mark.parametrize("fmt", ["png", "pdf"])
def test_the_pass_before_drawing_draws_no_cell(tmp_path, fmt, monkeypatch):
    """savefig's layout pass (renderer drawing disabled) places the cells but draws none: one
    drawing of each cell per file. Fails if matplotlib stops marking that pass as
    figures._paints_nothing reads it (Fig. 8 would be slower, not different)."""
    fig, shown = _table_figure(10, fast=True)
    drawn = []
    monkeypatch.setattr(Cell, "draw", lambda self, renderer: drawn.append(self))
    fig.savefig(tmp_path / f"t.{fmt}", dpi=style.DPI, bbox_inches="tight", pad_inches=0.05)
    assert len(drawn) == len(shown.get_celld())


def test_fig8_draws_its_table_fast(tmp_path):
    from gpuwrite.model import validation
    fig = figures.validation_table(figures.pd.DataFrame())
    shown = next(child for ax in fig.axes for child in ax.get_children() if child.get_gid() == "validation")
    assert isinstance(shown, figures._FastTable)
    assert len({(r, c) for r, c in shown.get_celld()}) == 9 * (len(validation.table()) + 1)
