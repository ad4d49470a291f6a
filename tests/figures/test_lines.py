"""Line charts: the files are valid PNGs and the charts show what was asked."""

import math

import numpy as np
import pytest

from lmlab.figures import save_line_plot
from png_files import read_png

BLUE, ORANGE = (31, 119, 180), (255, 127, 14)  # the first two series colours


def pixels_of(img: np.ndarray, color) -> np.ndarray:
    """(N, 2) row, column of every pixel painted exactly `color`."""
    return np.argwhere((img == np.array(color, dtype=np.uint8)).all(axis=2))


def below_legend(pixels: np.ndarray) -> np.ndarray:
    """Drop the top 50 rows, where a one-entry legend's swatch sits in a 640x400 chart."""
    return pixels[pixels[:, 0] > 50]


def straightness(pixels: np.ndarray) -> float:
    """|correlation| of rows with columns: 1 for a straight line."""
    return abs(np.corrcoef(pixels[:, 0], pixels[:, 1])[0, 1])


def test_plot_is_valid_png_of_requested_size(tmp_path):
    path = save_line_plot(tmp_path / "loss.png", {"train": ([0, 1, 2], [3.0, 2.0, 1.5])},
                          title="loss", xlabel="step", ylabel="nats", size=(320, 200))
    img = read_png(path)
    assert img.shape == (200, 320, 3)
    assert (img == 255).all(axis=2).mean() > 0.5  # mostly white background


def test_two_series_show_both_colours(tmp_path):
    x = np.arange(100)
    path = save_line_plot(tmp_path / "p.png", {"train": (x, np.exp(-x / 30)),
                                              "val": (x, np.exp(-x / 40) + 0.1)})
    img = read_png(path)
    assert len(pixels_of(img, BLUE)) > 300 and len(pixels_of(img, ORANGE)) > 300  # not just legend


def test_log_y_draws_exponential_decay_as_a_straight_line(tmp_path):
    x = np.arange(50)
    y = 10.0 ** (-x / 10)
    y[[3, 7]] = [0.0, -1.0]  # not drawable on a log axis: skipped
    log_img = read_png(save_line_plot(tmp_path / "log.png", {"g": (x, y)}, log_y=True))
    lin_img = read_png(save_line_plot(tmp_path / "lin.png", {"g": (x, y)}))
    assert straightness(below_legend(pixels_of(log_img, BLUE))) > 0.99
    assert straightness(below_legend(pixels_of(lin_img, BLUE))) < 0.95


def test_log_x_draws_a_power_law_straight_and_skips_non_positive_x(tmp_path):
    x = np.logspace(0, 4, 50)
    x[[3, 7]] = [0.0, -1.0]  # not drawable on a log axis: skipped
    y = 1 / np.sqrt(np.maximum(x, 1))
    log_img = read_png(save_line_plot(tmp_path / "log.png", {"g": (x, y)}, log_x=True, log_y=True))
    lin_img = read_png(save_line_plot(tmp_path / "lin.png", {"g": (x, y)}, log_y=True))
    assert straightness(below_legend(pixels_of(log_img, BLUE))) > 0.99
    assert straightness(below_legend(pixels_of(lin_img, BLUE))) < 0.95


def test_non_finite_points_are_skipped_and_one_point_is_a_dot(tmp_path):
    noisy = ([0, 1, 2, 3], [1.0, math.nan, math.inf, 0.5])
    dot = save_line_plot(tmp_path / "dot.png", {"noisy": noisy, "one": ([1.5], [0.7])})
    none = save_line_plot(tmp_path / "none.png", {"noisy": noisy, "one": ([1.5], [math.nan])})
    dot_img, none_img = read_png(dot), read_png(none)
    assert len(pixels_of(dot_img, BLUE)) > 300  # the finite points are joined
    assert len(pixels_of(dot_img, ORANGE)) > len(pixels_of(none_img, ORANGE))  # legend + dot


def test_empty_series_raises(tmp_path):
    with pytest.raises(ValueError, match="at least one series"):
        save_line_plot(tmp_path / "p.png", {})
    assert not (tmp_path / "p.png").exists()


def test_mismatched_lengths_raise(tmp_path):
    with pytest.raises(ValueError, match="'a' has 3 x values but 2 y values"):
        save_line_plot(tmp_path / "p.png", {"a": ([0, 1, 2], [1.0, 2.0])})
