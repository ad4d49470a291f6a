"""Tick labels: short numbers a reader takes in at a glance."""

import pytest

from lmlab.figures.ticks import format_number


@pytest.mark.parametrize(
    "value, label",
    [(0, "0"), (1200, "1.2k"), (3.5, "3.5"), (0.01, "0.01"), (2.5e6, "2.5M"), (-250, "-250"),
     (2e-5, "2e-5")],
)
def test_tick_labels_are_compact(value, label):
    assert format_number(value) == label
