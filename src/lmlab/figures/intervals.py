"""Shares with their confidence intervals as a PNG: one horizontal bar per row, its interval drawn as a
whisker across the bar's end, and an optional reference line (0.5: no preference; chance).

For results that are a handful of numbers each with an interval (bias by category, MC1 / MC2 per
prompt), where a line chart would join points that are not a series. Rows of the same `group` share a
colour, and the legend names the groups.
"""

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lmlab.figures.font import CAP_HEIGHT, draw_text, text_width
from lmlab.figures.raster import FRAME, GRID, INK, PALETTE, canvas, fill, frame, write_png
from lmlab.figures.ticks import axis_ticks

BAR_ROW = 22  # pixels per row at scale 1
WHISKER = (33, 33, 33)


@dataclass(frozen=True)
class IntervalRow:
    """One bar: its label, value and interval (low <= value <= high), and the group that colours it."""

    label: str
    value: float
    low: float
    high: float
    group: str = ""


def save_interval_chart(path: str | os.PathLike, rows: Sequence[IntervalRow], title: str = "", xlabel: str = "",
                        value_range: tuple[float, float] = (0.0, 1.0), reference: float | None = None,
                        width: int = 640) -> Path:
    """Draw `rows` top to bottom as bars from value_range[0] with interval whiskers, a dashed vertical
    line at `reference` when given, and save the PNG at `path`."""
    if not rows:
        raise ValueError("save_interval_chart needs at least one row")
    lo, hi = value_range
    if not lo < hi or any(not lo <= r.low <= r.value <= r.high <= hi for r in rows):
        raise ValueError(f"each row needs low <= value <= high within {value_range}")
    groups = list(dict.fromkeys(r.group for r in rows))
    title_h = CAP_HEIGHT * 2 + 14 if title else 0
    legend_h = 16 if any(groups) else 0
    top, left = 10 + title_h + legend_h, 16 + max(text_width(r.label, 1) for r in rows)
    right, bottom = width - 24, 10 + title_h + legend_h + BAR_ROW * len(rows)
    height = bottom + 30 + (CAP_HEIGHT + 10 if xlabel else 0)
    img = canvas(height, width)

    def to_px(x: float) -> int:
        return int(round(left + (x - lo) / (hi - lo) * (right - left - 1)))

    ticks, labels = axis_ticks(lo, hi, 6, False)
    for tick, label in zip(ticks, labels):
        fill(img, to_px(tick), top, to_px(tick) + 1, bottom, GRID)
        draw_text(img, label, to_px(tick), bottom + 8, INK, 1, anchor="center")
    for i, row in enumerate(rows):
        y = top + i * BAR_ROW
        fill(img, left, y + 5, max(to_px(row.value), left + 1), y + BAR_ROW - 5, PALETTE[groups.index(row.group) % 10])
        fill(img, to_px(row.low), y + BAR_ROW // 2, to_px(row.high) + 1, y + BAR_ROW // 2 + 1, WHISKER)
        for end in (row.low, row.high):
            fill(img, to_px(end), y + 7, to_px(end) + 1, y + BAR_ROW - 7, WHISKER)
        draw_text(img, row.label, left - 8, y + (BAR_ROW - CAP_HEIGHT) // 2, INK, 1, anchor="right")
    if reference is not None and lo <= reference <= hi:
        for y in range(top, bottom, 6):  # dashed
            fill(img, to_px(reference), y, to_px(reference) + 1, y + 3, FRAME)
    frame(img, left, top, right, bottom)
    draw_text(img, title, width // 2, 10, INK, 2, anchor="center")
    if xlabel:
        draw_text(img, xlabel, (left + right) // 2, bottom + 14 + CAP_HEIGHT, INK, 1, anchor="center")
    x = left
    for group in (g for g in groups if g):
        fill(img, x, top - legend_h + 2, x + 12, top - legend_h + 2 + CAP_HEIGHT, PALETTE[groups.index(group) % 10])
        draw_text(img, group, x + 16, top - legend_h + 2, INK, 1)
        x += 16 + text_width(group, 1) + 16
    return write_png(path, img)
