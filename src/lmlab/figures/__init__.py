"""Figures: line charts, heatmaps and token strips as PNG files, drawn with numpy alone (no matplotlib;
docs/development.md, "Figures", says why).

The public API, used by training (loss.png), eval, inspect, experiments, the CLI and the benchmarks:

- `save_line_plot(path, {name: (xs, ys)}, title, xlabel, ylabel, log_y, size, log_x)`: a line chart.
- `heatmap_image(matrix, row_labels, col_labels, title, cell, value_range, cell_text)` -> (H, W, 3) uint8,
  `save_heatmap(path, ...)`: the same as a PNG; `heatmap_grid(images, columns, title)`: maps side by side;
  `axis_label(token)`: a token as the font can show it.
- `token_strip_image(tokens, scores, title)`, `save_token_strip(path, ...)`: per-token scores as a PNG;
  `token_html(...)`, `save_token_html(path, ...)`: the same as an HTML page; `token_colours(scores)`.
- `save_interval_chart(path, rows, title, xlabel, value_range, reference)`: shares with their intervals as
  horizontal bars (`IntervalRow(label, value, low, high, group)`).
- `write_png(path, rgb)`: any (H, W, 3) uint8 array as a PNG, atomically.

Inside: `raster.py` (the canvas, its colours, PNG encoding), `font.py` (the bitmap font), `ticks.py` (axis
ticks and number labels), `lines.py`, `heatmap.py`, `intervals.py`, `token_strip.py` (one kind of figure
each). The package imports only `lmlab.io`'s atomic writes.
"""

from lmlab.figures.heatmap import axis_label, heatmap_grid, heatmap_image, save_heatmap
from lmlab.figures.intervals import IntervalRow, save_interval_chart
from lmlab.figures.lines import save_line_plot
from lmlab.figures.raster import write_png
from lmlab.figures.token_strip import save_token_html, save_token_strip, token_colours, token_html, token_strip_image

__all__ = [
    "IntervalRow", "axis_label", "heatmap_grid", "heatmap_image", "save_heatmap", "save_interval_chart",
    "save_line_plot", "save_token_html", "save_token_strip", "token_colours", "token_html", "token_strip_image", "write_png",
]
