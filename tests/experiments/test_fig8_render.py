"""Fig. 8 (the validation table) is drawn without ``ax.table``: a mesh of cell colours and
each cell's text as glyph outlines (figures._draw_cell_table). Read back from the drawn
artists: every cell's text at its cell and inside it, every cell's colour, the header, the
caveat."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextPath

from gpuwrite.experiments import figures
from gpuwrite.model import validation

HEADER = ["machine", "quantity", "size", "measured", "model", "unit", "error %", "within 10 %", "link-bound Gb/s"]
# the stored sweep's link-bound rates, two sizes of it
LINK = pd.DataFrame({"backend": "model", "measure": "efficiency", "size_bytes": [256, 512],
                     "effective_rate_gbps": [50.5, 51.25]})


# The repository's calibration files: validation.table()'s default lies beside the package,
# which an installed (not editable) package does not have, and without them no row misses.
CALIBRATION = Path(__file__).resolve().parents[2] / "experiments" / "calibration"


@pytest.fixture(scope="module")
def drawn():
    frame = validation.table(CALIBRATION)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(validation, "table", lambda: frame)
        fig = figures.validation_table(LINK)
    fig.draw_without_rendering()              # the layout, so the axes' size is final
    cells, _ = figures._validation_cells(frame, {256: 50.5, 512: 51.25})
    return fig, frame, cells


def _artists(fig, gid):
    return [a for ax in fig.axes for a in ax.get_children() if a.get_gid() == gid]


def _contours(path):
    """Each contour's bounding box, relative to the whole path's, in units of its width:
    the same for one string at any size and position, different for different strings."""
    polygons = [p for p in path.to_polygons(closed_only=False) if len(p)]
    vertices = np.concatenate(polygons)
    origin, width = vertices.min(axis=0), np.ptp(vertices[:, 0])
    boxes = [np.concatenate([(p.min(axis=0) - origin) / width, (p.max(axis=0) - origin) / width])
             for p in polygons]
    return np.array(sorted(map(tuple, boxes)))


def _drawn_cells(fig):
    """{(row, column): path in points} of every drawn cell text (row 0: the header)."""
    (mesh,) = _artists(fig, "validation|colours")
    edges = mesh.get_coordinates()
    xs, ys = edges[0, :, 0], edges[:, 0, 1]
    found = {}
    for stamp in _artists(fig, "validation|text"):
        paths, offsets = stamp.get_paths(), np.asarray(stamp.get_offsets())
        columns = np.searchsorted(xs, offsets[:, 0])
        assert np.allclose(xs[columns], offsets[:, 0])          # at a column's left edge
        rows = np.searchsorted(ys, offsets[:, 1]) - 1
        assert np.all((ys[rows] < offsets[:, 1]) & (offsets[:, 1] < ys[rows + 1]))
        for k, where in enumerate(zip(rows.tolist(), columns.tolist())):
            assert where not in found
            found[where] = paths[k % len(paths)]
    return found


def test_every_cell_shows_its_text_inside_its_cell(drawn):
    fig, frame, cells = drawn
    assert len(cells) == len(frame)
    assert [row[0] for row in cells] == list(frame["machine"])
    assert [row[1] for row in cells] == list(frame["quantity"])
    link = [row[8] for row in cells]
    assert link.count("50.5") == int(((frame["size_bytes"] == 256) & (frame["unit"] == "Gb/s")).sum()) > 0
    found = _drawn_cells(fig)
    expected = {(i + 1, j): text for i, row in enumerate(cells) for j, text in enumerate(row) if text}
    assert set(found) == set(expected)                    # no cell left out, none drawn twice
    prop = FontProperties(size=100)      # curves flattened finely enough to compare
    outline = {text: _contours(TextPath((0, 0), text, prop=prop)) for text in set(expected.values())}
    shapes = {}                                           # a path drawn in many cells: once
    for where, text in expected.items():
        path = found[where]
        shape = shapes.setdefault(id(path), (path, _contours(path)))[1]
        assert shape.shape == outline[text].shape and np.allclose(shape, outline[text], atol=0.02), (where, text)

    # inside its cell: the widest text of each column fits the column's width, in points
    ax = fig.axes[0]
    (mesh,) = _artists(fig, "validation|colours")
    xs = mesh.get_coordinates()[0, :, 0]
    axes_pt = ax.bbox.width / fig.dpi * 72
    row_pt = ax.bbox.height / fig.dpi * 72 / (len(cells) + 2)
    boxes = {id(path): path.get_extents() for path, _ in shapes.values()}
    for (row, column), path in found.items():
        box = boxes[id(path)]
        assert 0 < box.x0 and box.x1 < (xs[column + 1] - xs[column]) * axes_pt, (row, column)
        assert -row_pt / 2 < box.y0 and box.y1 < row_pt / 2, (row, column)


def test_every_cell_has_its_colour_and_the_misses_are_red(drawn):
    fig, frame, cells = drawn
    (mesh,) = _artists(fig, "validation|colours")
    colours = np.asarray(mesh.get_array())
    assert colours.shape == (len(frame) + 1, len(HEADER), 4)   # a header row plus one per comparison
    miss = (frame["within_goal"] == False).to_numpy()  # noqa: E712 (booleans and None)
    expected = np.array([to_rgba("white")] + [to_rgba("#f4d6d6" if m else "white") for m in miss])
    np.testing.assert_array_equal(colours, np.repeat(expected[:, None, :], len(HEADER), axis=1))
    assert miss.sum() == sum(row[7] == "NO" for row in cells) > 0


def test_header_and_caveat(drawn):
    fig, frame, _ = drawn
    header = [t.get_text().replace("\n", " ") for t in _artists(fig, "validation|header")]
    assert header == HEADER
    caveat = " ".join(t.get_text() for t in fig.texts if t.get_gid() == "caveat")
    assert validation.summary(frame) in caveat
