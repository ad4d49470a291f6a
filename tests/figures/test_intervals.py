"""Interval charts: one bar per row ending at its value, whiskers at its interval, groups coloured apart."""

import numpy as np
import pytest

from lmlab.figures import IntervalRow, save_interval_chart
from lmlab.figures.raster import PALETTE
from png_files import read_png


def test_bars_end_at_their_values_and_groups_have_their_own_colour(tmp_path):
    rows = [IntervalRow("a", 0.25, 0.1, 0.4, "x"), IntervalRow("b", 0.75, 0.6, 0.9, "y")]
    image = read_png(save_interval_chart(tmp_path / "c.png", rows, title="t", xlabel="share", reference=0.5))
    blue, orange = (np.all(image == colour, axis=2) for colour in PALETTE[:2])
    assert blue.any() and orange.any()
    blue_cols, orange_cols = np.nonzero(blue.any(0))[0], np.nonzero(orange.any(0))[0]
    bar_start = orange_cols.min()  # both bars start at 0; the legend swatches are left of nothing else
    blue_end = blue_cols.max()
    orange_end = orange_cols.max()
    assert orange_end - bar_start == pytest.approx(3 * (blue_end - bar_start), rel=0.05)


def test_a_row_outside_its_interval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="low <= value <= high"):
        save_interval_chart(tmp_path / "c.png", [IntervalRow("a", 0.5, 0.6, 0.9)])
    assert not (tmp_path / "c.png").exists()
