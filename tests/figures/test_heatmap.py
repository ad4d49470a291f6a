"""Heatmap PNGs: valid files whose cells are shaded in the order of the values, with labels drawn."""

import numpy as np
import pytest

from lmlab.figures import axis_label, heatmap_grid, heatmap_image, save_heatmap
from lmlab.figures.raster import FRAME, INK, WHITE
from png_files import read_png


def colour_counts(img: np.ndarray) -> dict[tuple, int]:
    colours, counts = np.unique(img.reshape(-1, 3), axis=0, return_counts=True)
    return {tuple(int(v) for v in c): int(n) for c, n in zip(colours, counts)}


def test_saved_heatmap_is_a_valid_png_of_the_rendered_image(tmp_path):
    matrix = np.arange(12.0).reshape(3, 4)
    path = save_heatmap(tmp_path / "map.png", matrix, ["a", "b", "c"], list("wxyz"), title="t")
    assert np.array_equal(read_png(path), heatmap_image(matrix, ["a", "b", "c"], list("wxyz"), title="t"))
    assert not list(tmp_path.glob("*.tmp"))


def test_cells_darken_left_to_right_as_values_grow():
    values = [0.25, 0.5, 0.75, 1.0]
    img = heatmap_image([[0.0] + values], ["r"], list("abcde"), cell=10, value_range=(0.0, 1.0))
    cells = [c for c, n in colour_counts(img).items() if n >= 100 and c not in (WHITE, INK, FRAME)]  # 10x10 cells
    assert len(cells) == len(values)
    lightest_first = sorted(cells, key=sum, reverse=True)
    first_column = [np.argwhere((img == np.array(c, dtype=np.uint8)).all(axis=2))[:, 1].min() for c in lightest_first]
    assert first_column == sorted(first_column)  # lighter (smaller) values sit further left


def test_labels_are_drawn_and_long_column_labels_stand_on_end():
    short = heatmap_image(np.eye(3), list("abc"), list("xyz"))
    unlabelled = heatmap_image(np.eye(3), ["", "", ""], ["", "", ""])
    long = heatmap_image(np.eye(3), list("abc"), ["token_one", "token_two", "token_three"])
    ink = lambda img: int((img == np.array(INK, dtype=np.uint8)).all(axis=2).sum())  # noqa: E731
    assert ink(short) > ink(unlabelled)
    assert long.shape[0] > short.shape[0]  # rotated labels need height, not width


def test_big_matrices_get_smaller_cells_and_sparser_labels():
    small = heatmap_image(np.ones((4, 4)), list("abcd"), list("abcd"))
    big = heatmap_image(np.random.default_rng(0).random((400, 400)), [str(i) for i in range(400)],
                        [str(i) for i in range(400)])
    assert small.shape[0] < 200 and big.shape[0] < 1800 and big.shape[1] < 1800


@pytest.mark.parametrize("matrix,rows,cols,message", [
    (np.ones((2, 3)), ["a"], list("abc"), "2 row labels"),
    (np.ones(3), ["a"], list("abc"), "2-D"),
    (np.array([[1.0, np.nan]]), ["a"], list("ab"), "finite"),
])
def test_bad_input_is_refused(matrix, rows, cols, message):
    with pytest.raises(ValueError, match=message):
        heatmap_image(matrix, rows, cols)


def test_cell_text_widens_the_cells_and_writes_light_on_dark():
    plain = heatmap_image([[0.0, 1.0]], ["0"], ["a", "b"], value_range=(0.0, 1.0))
    table = heatmap_image([[0.0, 1.0]], ["0"], ["a", "b"], value_range=(0.0, 1.0), cell_text=[["Paris", "Rome"]])
    assert table.shape[1] > plain.shape[1]
    blank = heatmap_image([[0.0, 1.0]], ["0"], ["a", "b"], value_range=(0.0, 1.0), cell_text=[["Paris", "    "]])
    assert blank.shape == table.shape
    letters = (table != blank).any(axis=2)  # where "Rome" was written: in the dark cell, in white
    assert letters.any()
    assert (table[letters] == np.array(WHITE, dtype=np.uint8)).all()
    assert (blank[letters] == blank[letters][0]).all() and blank[letters][0].sum() < 300
    with pytest.raises(ValueError, match="cell texts"):
        heatmap_image([[0.0, 1.0]], ["0"], ["a", "b"], cell_text=[["Paris"]])


def test_grid_places_every_head_under_one_title():
    maps = [heatmap_image(np.eye(3) * h, list("abc"), list("abc"), title=f"head {h}") for h in range(5)]
    grid = heatmap_grid(maps, 3, "layer 1")
    h, w, _ = maps[0].shape
    assert grid.shape[0] > 2 * h and grid.shape[1] == 3 * w  # two rows of three slots, plus the title
    assert np.array_equal(grid[-h:, :w], maps[3])  # head 3 starts the second row


def test_axis_labels_show_spaces_and_hide_what_the_font_cannot_draw():
    assert axis_label(" cat") == "_cat" and axis_label("\u0120dog") == "_dog" and axis_label("\u2581de") == "_de"
    assert axis_label("caf\u00e9\n") == "caf?\\n"
