"""Heatmaps as PNG files (attention maps, confusion matrices), drawn with numpy alone.

A matrix (R, C) becomes a grid of cells shaded from white (the smallest value) to dark blue (the
largest), with a label per row on the left, a label per column on top (upright when it fits in a
cell, else written bottom to top, so long labels such as subword tokens fit), a title and a colour
bar with its range, in the figures' bitmap font (`font.py`).

A table variant writes a short text in each cell (the logit lens: each layer's top token, shaded by
its probability): the cells then widen to the longest text. `heatmap_grid` lays several rendered
maps side by side under one title (the heads of one attention layer).
"""

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lmlab.figures.font import CAP_HEIGHT, draw_text, text_mask, text_width
from lmlab.figures.raster import INK, WHITE, blit, canvas, frame, write_png
from lmlab.figures.ticks import format_number

_LOW, _HIGH = np.array(WHITE, dtype=float), np.array((8, 48, 107), dtype=float)  # white -> dark blue
_MAX_GRID = 1600  # pixels: larger matrices get smaller cells
_LABEL_ROOM = CAP_HEIGHT + 2  # a cell needs this many pixels to carry a label


def heatmap_image(matrix, row_labels: Sequence[str], col_labels: Sequence[str], title: str = "",
                  cell: int | None = None, value_range: tuple[float, float] | None = None,
                  cell_text: Sequence[Sequence[str]] | None = None) -> np.ndarray:
    """Render `matrix` (R, C) as an (H, W, 3) uint8 image; see the module docstring.

    `cell` is the side of a cell in pixels (default: 20, smaller for big matrices so the grid stays
    under 1600 px). `value_range` (lo, hi) fixes the colour scale (default: the matrix's min and max;
    attention weights may want (0, 1)). When cells are too small for every label, every k-th is drawn.
    `cell_text` (R rows of C strings) is written inside the cells, which then are one text line high
    and as wide as the longest text (`cell` is ignored).
    """
    values = np.asarray(matrix, dtype=float)
    if values.ndim != 2 or 0 in values.shape:
        raise ValueError(f"heatmap needs a non-empty 2-D matrix, got shape {values.shape}")
    rows, cols = values.shape
    if len(row_labels) != rows or len(col_labels) != cols:
        raise ValueError(f"a ({rows}, {cols}) matrix needs {rows} row labels and {cols} column labels, "
                         f"got {len(row_labels)} and {len(col_labels)}")
    if not np.isfinite(values).all():
        raise ValueError("heatmap values must be finite")
    if cell_text is not None and (len(cell_text) != rows or any(len(line) != cols for line in cell_text)):
        raise ValueError(f"a ({rows}, {cols}) matrix needs {rows} rows of {cols} cell texts")
    if cell_text is None:
        cell_w = cell_h = cell or max(1, min(20, _MAX_GRID // max(rows, cols)))
    else:
        cell_h = CAP_HEIGHT + 6
        cell_w = max(cell_h, max(text_width(str(t), 1) for line in cell_text for t in line) + 6)
    lo, hi = value_range or (values.min(), values.max())
    shade = np.clip((values - lo) / (hi - lo), 0, 1) if hi > lo else np.zeros_like(values)  # (R, C) in [0, 1]

    row_step, col_step = math.ceil(_LABEL_ROOM / cell_h), math.ceil(_LABEL_ROOM / cell_w)
    row_text = [str(label) if i % row_step == 0 else "" for i, label in enumerate(row_labels)]
    col_text = [str(label) if j % col_step == 0 else "" for j, label in enumerate(col_labels)]
    margin, bar_w = 10, 12
    range_labels = [format_number(lo), format_number(hi)]
    left = margin + max(text_width(t, 1) for t in row_text) + 6
    title_h = 2 * CAP_HEIGHT + 12 if title else 0
    upright = [text_width(t, 1) <= cell_w for t in col_text]  # labels that fit a cell (characters) stand upright
    col_h = max(CAP_HEIGHT if up else text_width(t, 1) for t, up in zip(col_text, upright))
    top = margin + title_h + col_h + 6
    grid_w, grid_h = cols * cell_w, rows * cell_h
    bar_left = left + grid_w + 12
    width = max(bar_left + bar_w + 6 + max(text_width(t, 1) for t in range_labels) + margin,
                text_width(title, 2) + 2 * margin)
    height = top + max(grid_h, 4 * CAP_HEIGHT) + margin

    img = canvas(height, width)
    colours = (_LOW + shade[..., None] * (_HIGH - _LOW)).round().astype(np.uint8)  # (R, C, 3)
    img[top:top + grid_h, left:left + grid_w] = colours.repeat(cell_h, axis=0).repeat(cell_w, axis=1)
    frame(img, left, top, left + grid_w, top + grid_h)
    for i, text in enumerate(row_text):
        draw_text(img, text, left - 4, top + i * cell_h + (cell_h - CAP_HEIGHT) // 2, INK, 1, anchor="right")
    for j, (text, up) in enumerate(zip(col_text, upright)):
        if up:
            draw_text(img, text, left + j * cell_w + cell_w // 2, top - 4 - CAP_HEIGHT, INK, 1, anchor="center")
        elif text:
            mask = np.rot90(text_mask(text, 1))  # reads bottom to top, baseline towards the right
            blit(img, mask, left + j * cell_w + (cell_w - CAP_HEIGHT) // 2 - 1, top - 4 - mask.shape[0], INK)
    for i, line in enumerate(cell_text or []):
        for j, text in enumerate(line):  # white on dark cells, ink on light ones
            draw_text(img, str(text), left + j * cell_w + cell_w // 2, top + i * cell_h + 3,
                       WHITE if shade[i, j] > 0.5 else INK, 1, anchor="center")
    draw_text(img, title, width // 2, margin, INK, 2, anchor="center")

    bar_h = max(grid_h, 4 * CAP_HEIGHT)  # the colour bar: hi at the top, lo at the bottom
    ramp = np.linspace(1, 0, bar_h)[:, None, None]  # (bar_h, 1, 1)
    img[top:top + bar_h, bar_left:bar_left + bar_w] = (_LOW + ramp * (_HIGH - _LOW)).round().astype(np.uint8)
    frame(img, bar_left, top, bar_left + bar_w, top + bar_h)
    draw_text(img, range_labels[1], bar_left + bar_w + 6, top, INK, 1)
    draw_text(img, range_labels[0], bar_left + bar_w + 6, top + bar_h - CAP_HEIGHT, INK, 1)
    return img


def save_heatmap(path: str | os.PathLike, matrix, row_labels: Sequence[str], col_labels: Sequence[str],
                 title: str = "", cell: int | None = None, value_range: tuple[float, float] | None = None,
                 cell_text: Sequence[Sequence[str]] | None = None) -> Path:
    """Draw `matrix` with its row and column labels (see `heatmap_image`) and save it as a PNG, atomically."""
    return write_png(path, heatmap_image(matrix, row_labels, col_labels, title, cell, value_range, cell_text))


def heatmap_grid(images: Sequence[np.ndarray], columns: int, title: str = "") -> np.ndarray:
    """Rendered images (e.g. `heatmap_image`s) laid out row by row, `columns` to a row, each in a slot
    as big as the largest, under a `title`: one (H, W, 3) uint8 image."""
    if not images or columns < 1:
        raise ValueError("a heatmap grid needs at least one image and one column")
    slot_h, slot_w = max(im.shape[0] for im in images), max(im.shape[1] for im in images)
    columns = min(columns, len(images))
    rows = math.ceil(len(images) / columns)
    margin = 10
    title_h = 2 * CAP_HEIGHT + 12 if title else 0
    width = max(columns * slot_w, text_width(title, 2) + 2 * margin)
    img = canvas(title_h + rows * slot_h, width)
    draw_text(img, title, width // 2, margin, INK, 2, anchor="center")
    for n, image in enumerate(images):
        y, x = title_h + (n // columns) * slot_h, (n % columns) * slot_w
        img[y:y + image.shape[0], x:x + image.shape[1]] = image
    return img


_SPACE_MARKS = str.maketrans({" ": "_", "\u0120": "_", "\u2581": "_", "\n": "\\n", "\u010a": "\\n", "\t": "\\t"})


def axis_label(token: str) -> str:
    """A token as the ASCII font can show it: spaces (and the BPE / SentencePiece space marks) as "_",
    newlines and tabs escaped, any other non-ASCII character as "?"."""
    return "".join(c if c.isascii() and c.isprintable() else "?" for c in token.translate(_SPACE_MARKS))
