"""Heatmap PNGs: valid files whose cells are shaded in the order of the values, with labels drawn."""

import numpy as np
import pytest

from lmlab.eval.heatmap import heatmap_image, save_heatmap
from lmlab.eval.plot import _FRAME, _INK, _WHITE

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
    cells = [c for c, n in colour_counts(img).items() if n >= 100 and c not in (_WHITE, _INK, _FRAME)]  # 10x10 cells
    assert len(cells) == len(values)
    lightest_first = sorted(cells, key=sum, reverse=True)
    first_column = [np.argwhere((img == np.array(c, dtype=np.uint8)).all(axis=2))[:, 1].min() for c in lightest_first]
    assert first_column == sorted(first_column)  # lighter (smaller) values sit further left


def test_labels_are_drawn_and_long_column_labels_stand_on_end():
    short = heatmap_image(np.eye(3), list("abc"), list("xyz"))
    unlabelled = heatmap_image(np.eye(3), ["", "", ""], ["", "", ""])
    long = heatmap_image(np.eye(3), list("abc"), ["token_one", "token_two", "token_three"])
    ink = lambda img: int((img == np.array(_INK, dtype=np.uint8)).all(axis=2).sum())  # noqa: E731
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
