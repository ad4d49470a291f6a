"""Line charts as PNG files (training curves, scaling laws): axes, grid, tick labels, title, legend
and one coloured line per series, rasterised with numpy onto a `raster` canvas.
"""

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lmlab.figures.font import CAP_HEIGHT, GLYPH_ROWS, draw_text, text_mask, text_width
from lmlab.figures.raster import FRAME, GRID, INK, LEGEND_EDGE, PALETTE, WHITE, blit, canvas, fill, frame, write_png
from lmlab.figures.ticks import axis_ticks, padded_range


def save_line_plot(
    path: str | os.PathLike,
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    log_y: bool = False,
    size=(640, 400),
    log_x: bool = False,
) -> Path:
    """Draw `series` (name -> (xs, ys)) as a line chart and save it as a PNG at `path`.

    For training curves without a plotting library: numpy rasterisation, a built-in bitmap
    font, one colour per series with a legend. NaN/inf points are skipped (and non-positive y
    with `log_y`, which plots log10 of y; likewise x with `log_x`); a series with one point draws a dot.
    """
    width, height = size
    if width < 160 or height < 120:
        raise ValueError(f"size must be at least (160, 120) pixels, got {size}")
    if not series:
        raise ValueError("save_line_plot needs at least one series, got an empty dict")
    points = {name: _finite_points(name, xs, ys, log_x, log_y) for name, (xs, ys) in series.items()}
    all_x = np.concatenate([x for x, _ in points.values()])
    all_y = np.concatenate([y for _, y in points.values()])

    scale = 1 if min(width, height) < 600 else 2
    x_lo, x_hi = padded_range(all_x, (0.0, 1.0))
    y_lo, y_hi = padded_range(all_y, (0.0, 1.0))
    x_ticks, x_labels = axis_ticks(x_lo, x_hi, max(3, width // (110 * scale)), log_x)
    y_ticks, y_labels = axis_ticks(y_lo, y_hi, max(3, height // (70 * scale)), log_y)

    # Layout: margins grow with what sits in them (title, labels, the widest tick label).
    s = scale
    title_h = (CAP_HEIGHT * 2 * s + 12 * s) if title else 0
    top = 12 * s + title_h
    left = 10 * s + (CAP_HEIGHT * s + 10 * s if ylabel else 0)
    left += max(text_width(label, s) for label in y_labels) + 8 * s
    bottom = height - 12 * s - CAP_HEIGHT * s - 8 * s - (GLYPH_ROWS * s + 8 * s if xlabel else 0)
    right = width - max(16 * s, text_width(x_labels[-1], s) // 2 + 6 * s)
    box = (left, top, right, bottom)

    def to_px(x, y):  # data -> pixel centres; y grows downward in the image
        px = left + (np.asarray(x) - x_lo) / (x_hi - x_lo) * (right - left - 1)
        py = top + (y_hi - np.asarray(y)) / (y_hi - y_lo) * (bottom - top - 1)
        return np.rint(px).astype(int), np.rint(py).astype(int)

    img = canvas(height, width)
    label_mid = (CAP_HEIGHT * s) // 2
    for tick, label in zip(x_ticks, x_labels):
        px = int(to_px(tick, y_lo)[0])
        fill(img, px, top, px + 1, bottom, GRID)
        fill(img, px, bottom, px + 1, bottom + 4 * s, FRAME)
        draw_text(img, label, px, bottom + 8 * s, INK, s, anchor="center")
    for tick, label in zip(y_ticks, y_labels):
        py = int(to_px(x_lo, tick)[1])
        fill(img, left, py, right, py + 1, GRID)
        fill(img, left - 4 * s, py, left, py + 1, FRAME)
        draw_text(img, label, left - 7 * s, py - label_mid, INK, s, anchor="right")

    before = img.copy()
    for (xs, ys), color in zip(points.values(), _colors(len(points))):
        if len(xs):
            _draw_polyline(img, *to_px(xs, ys), color, box, s)
    ink = (img != before).any(axis=2)  # (H, W) pixels covered by data lines

    frame(img, *box)
    draw_text(img, title, (left + right) // 2, 12 * s, INK, 2 * s, anchor="center")
    if xlabel:
        y = bottom + 8 * s + CAP_HEIGHT * s + 10 * s
        draw_text(img, xlabel, (left + right) // 2, y, INK, s, anchor="center")
    if ylabel:
        mask = np.rot90(text_mask(ylabel, s))  # reads bottom to top
        blit(img, mask, 10 * s, (top + bottom) // 2 - mask.shape[0] // 2, INK)
    _draw_legend(img, [str(name) for name in points], _colors(len(points)), box, ink, s)
    return write_png(path, img)


def _finite_points(name: str, xs, ys, log_x: bool, log_y: bool) -> tuple[np.ndarray, np.ndarray]:
    """Check one series and keep its drawable points: finite, and positive (as log10) on a log axis."""
    x = np.asarray(xs, dtype=float).ravel()
    y = np.asarray(ys, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"series {name!r} has {x.size} x values but {y.size} y values")
    keep = np.isfinite(x) & np.isfinite(y) & ((x > 0) | (not log_x)) & ((y > 0) | (not log_y))
    x, y = x[keep], y[keep]
    return (np.log10(x) if log_x else x), (np.log10(y) if log_y else y)


def _colors(n: int) -> list[tuple[int, int, int]]:
    """`n` series colours, cycling through a 10-colour palette chosen to stay distinct."""
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


def _draw_legend(img, names: list[str], colors, box, ink: np.ndarray, s: int) -> None:
    """Draw a boxed legend in the plot corner that hides the fewest data pixels."""
    left, top, right, bottom = box
    swatch, pad, row = 18 * s, 6 * s, 13 * s
    legend_w = swatch + 6 * s + max(text_width(n, s) for n in names) + 2 * pad
    legend_h = row * len(names) - (row - CAP_HEIGHT * s) + 2 * pad
    inset = 8 * s
    corners = [
        (right - inset - legend_w, top + inset),  # top right first: loss curves leave it empty
        (left + inset, top + inset),
        (right - inset - legend_w, bottom - inset - legend_h),
        (left + inset, bottom - inset - legend_h),
    ]

    def hidden(corner):
        x, y = corner
        return int(ink[max(y, 0) : y + legend_h, max(x, 0) : x + legend_w].sum())

    x, y = min(corners, key=hidden)
    fill(img, x, y, x + legend_w, y + legend_h, LEGEND_EDGE)
    fill(img, x + 1, y + 1, x + legend_w - 1, y + legend_h - 1, WHITE)
    for i, (name, color) in enumerate(zip(names, colors)):
        row_y = y + pad + i * row
        mid = row_y + (CAP_HEIGHT * s) // 2
        fill(img, x + pad, mid - s, x + pad + swatch, mid + s + 1, color)
        draw_text(img, name, x + pad + swatch + 6 * s, row_y, INK, s)


def _stamp(img, xs: np.ndarray, ys: np.ndarray, offsets, color, clip) -> None:
    """Paint `color` at every (x, y) + offset that falls inside the `clip` box (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = clip
    for dx, dy in offsets:
        px, py = xs + dx, ys + dy
        keep = (px >= x0) & (px < x1) & (py >= y0) & (py < y1)
        img[py[keep], px[keep]] = color


def _draw_polyline(img, xs: np.ndarray, ys: np.ndarray, color, clip, scale: int) -> None:
    """Draw a 2 * scale px wide line through integer pixel points (xs, ys); one point is a dot.

    Each segment is sampled once per pixel along its longer side, so the line has no gaps.
    """
    if len(xs) == 1:
        r = 2 * scale
        span = range(-r, r + 1)
        disc = [(ox, oy) for ox in span for oy in span if ox * ox + oy * oy <= r * r + 1]
        _stamp(img, xs, ys, disc, color, clip)
        return
    dx, dy = np.diff(xs), np.diff(ys)  # (S,) per segment
    steps = np.maximum(np.abs(dx), np.abs(dy)) + 1  # samples per segment
    segment = np.repeat(np.arange(len(steps)), steps)  # (N,) segment of each sample
    first = np.repeat(np.cumsum(steps) - steps, steps)  # (N,) index of the segment's first sample
    t = (np.arange(len(segment)) - first) / np.maximum(steps - 1, 1)[segment]
    px = np.rint(xs[segment] + t * dx[segment]).astype(int)
    py = np.rint(ys[segment] + t * dy[segment]).astype(int)
    pen = [(ox, oy) for ox in range(2 * scale) for oy in range(2 * scale)]
    _stamp(img, px, py, pen, color, clip)
