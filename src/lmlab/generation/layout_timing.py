"""The fp32 weight layouts a decoding step can multiply by, and which one is fastest, from a timing.

A decoding step multiplies every weight matrix W (out, in) by a few rows, so its speed is how fast
the weights stream from memory, and that depends on how they lie in it and on the CPU: on one AMD
EPYC, MKL's `F.linear` reads a plain `nn.Linear` weight at about 10 GB/s at one row, while the same
weight cut into column panels of 16 outputs, (out / 16, in, 16), every panel one contiguous block,
multiplied as a batched matmul, streams at 15-27 GB/s; on an Intel Xeon the plain layout wins at
one row and the panels at eight. So the candidates (`LAYOUTS`) are timed on the model's own weights:

- "plain": the weight as it is, `F.linear` (no copy);
- "panelsN": column panels of N outputs, N in 8, 16, 32, 64;
- "transposed": W.t() made contiguous (in, out): one panel as wide as the matrix.

Rows come in buckets (`BUCKETS`: 1, 2-4, 5-16, 17-64), each timed at about its geometric middle
(`TIMED_ROWS`: 1, 3, 8, 32); above 64 rows a product is a real matrix-matrix one and keeps the plain layout (prompts run on it).
Each weight keeps at most ONE copy besides its own, chosen at the fewest rows where a layout beats
plain (one row, on most CPUs: decoding a single sequence is the common case): the first of `LAYOUTS`
within 25% of the fastest there, so that near-ties, which timing one shape at a time cannot settle,
go the same way every time (to 16-column panels, the fastest in full SmolLM2 steps on the AMD VM at
1 and 8 rows, ahead of 32 by ~5%); it is used in every bucket where it beats plain.

Timed as a decoding step reads them: for each distinct weight shape, the model's own matrices of
that shape in a row (a prefix of them, so the time stays bounded), every shape in turn, so that
between two timings of one matrix the others have passed through the caches as in a real step;
`REPEATS` rounds interleaving the layouts, the best of each.
"""

import re
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from lmlab.progress import progress_bar

BUCKETS = (1, 4, 16, 64)  # row buckets by their largest row count: 1, 2-4, 5-16, 17-64
TIMED_ROWS = (1, 3, 8, 32)  # the rows each bucket is timed at
LAYOUTS = ("plain", "panels16", "panels32", "panels8", "panels64", "transposed")  # near-ties go to the first
REPEATS = 3
NEAR = 0.75  # layouts this close to the fastest are a tie: timings of one shape differ by as much from a full step
# (on the AMD VM the widths picked by 10% margins, 8 for qkv and 32 for out, decoded 0.94x as fast as 16 everywhere)
STREAM_FLOOR = 8 << 20  # bytes of one shape's matrices timed at one row, at least; more on a bigger cache
LLC_FALLBACK = 32 << 20  # bytes of last-level cache assumed where sysfs does not say


def panel_width(layout: str, out: int) -> int | None:
    """The panel width of `layout` for a weight of `out` outputs (None: the plain layout)."""
    if layout == "plain":
        return None
    return out if layout == "transposed" else int(layout.removeprefix("panels"))


def arrange(weight: torch.Tensor, width: int) -> torch.Tensor:
    """W (out, in) as column panels (ceil(out / width), in, width), each contiguous; out padded with zeros."""
    w = F.pad(weight, (0, 0, 0, -weight.size(0) % width))  # (out_padded, in)
    return w.t().reshape(w.size(1), -1, width).transpose(0, 1).contiguous()


def panel_product(x: torch.Tensor, panels: torch.Tensor, out: int) -> torch.Tensor:
    """x (rows, in) @ W.t() (rows, out), W given as `arrange`'s panels."""
    y = torch.matmul(x, panels)  # (n_panels, rows, width)
    return y.transpose(0, 1).reshape(x.size(0), -1)[:, :out]


def product(x: torch.Tensor, weight: torch.Tensor, panels: torch.Tensor | None) -> torch.Tensor:
    """x (rows, in) @ weight.t(), on the panels if given, else plain."""
    return F.linear(x, weight) if panels is None else panel_product(x, panels, weight.size(0))


def choose(speeds: dict[int, dict[str, float]]) -> tuple[str, ...]:
    """The layout of each bucket (in `BUCKETS` order) from the speeds (GB/s of weights, per bucket and
    layout) measured on one shape. One layout besides plain, chosen in the first bucket where one beats
    plain (one row, on most CPUs: decoding one sequence comes first): the first in `LAYOUTS` order
    within `NEAR` of that bucket's fastest; it is used wherever it beats plain."""
    for bucket in BUCKETS:
        best = max(speeds[bucket][layout] for layout in LAYOUTS[1:])
        if best > speeds[bucket]["plain"]:
            extra = next(layout for layout in LAYOUTS[1:] if speeds[bucket][layout] >= NEAR * best)
            return tuple(extra if speeds[b][extra] > speeds[b]["plain"] else "plain" for b in BUCKETS)
    return ("plain",) * len(BUCKETS)


TimeOnce = Callable[[str, int, str], float]  # (shape key, bucket, layout) -> GB/s of one timing


def measure(shapes: list[str], time_once: TimeOnce) -> dict[str, dict[int, dict[str, float]]]:
    """The best speed of every shape, bucket and layout over `REPEATS` interleaved rounds: other work
    on the machine only ever slows a timing down (a descheduled thread, a cache another process
    emptied), so the fastest round is the one closest to the layout's own speed."""
    runs = {shape: {bucket: {layout: [] for layout in LAYOUTS} for bucket in BUCKETS} for shape in shapes}
    with progress_bar(REPEATS * len(BUCKETS) * len(LAYOUTS), desc="timing fp32 layouts", unit="timing",
                      leave=False, delay=1.0) as bar:
        for _ in range(REPEATS):
            for bucket in BUCKETS:
                for layout in LAYOUTS:
                    for shape in shapes:
                        runs[shape][bucket][layout].append(time_once(shape, bucket, layout))
                    bar.update()
    return {shape: {bucket: {layout: max(values) for layout, values in by_layout.items()}
                    for bucket, by_layout in by_bucket.items()} for shape, by_bucket in runs.items()}


class StreamTimer:
    """`time_once` on real weights: per shape, a prefix of the model's matrices of that shape of at
    least `stream_bytes` (or all of them), arranged in every layout; at 32 rows, half of it (the
    product is bound by arithmetic there, not by memory; at 8 rows a prefix that fits in the cache
    favours the plain layout, which loses in a real step)."""

    def __init__(self, weights: dict[str, list[torch.Tensor]], stream_bytes: int):
        self.stream_bytes = stream_bytes
        self.weights = {shape: _prefix(matrices, stream_bytes) for shape, matrices in weights.items()}
        self.panels = {shape: {layout: [arrange(w, panel_width(layout, w.size(0))) for w in matrices]
                               for layout in LAYOUTS[1:]} for shape, matrices in self.weights.items()}

    def __call__(self, shape: str, bucket: int, layout: str) -> float:
        matrices, rows = self.weights[shape], TIMED_ROWS[BUCKETS.index(bucket)]
        count = len(_prefix(matrices, self.stream_bytes // max(1, rows // 16)))
        panels = self.panels[shape][layout][:count] if layout != "plain" else [None] * count
        x = torch.randn(rows, matrices[0].size(1), dtype=matrices[0].dtype)
        with torch.inference_mode():
            start = time.perf_counter()
            for weight, arranged in zip(matrices, panels):
                product(x, weight, arranged)
            seconds = time.perf_counter() - start
        return sum(w.numel() * w.element_size() for w in matrices[:count]) / max(seconds, 1e-9) / 1e9


def _prefix(matrices: list[torch.Tensor], stream_bytes: int) -> list[torch.Tensor]:
    """The first matrices whose bytes reach `stream_bytes` (at least one); a single matrix larger than
    that is cut to its first rows (a multiple of 64)."""
    taken, total = [], 0
    for w in matrices:
        if total >= stream_bytes:
            break
        row_bytes = w.size(1) * w.element_size()
        needed = -(-(stream_bytes - total) // row_bytes)  # rows, rounded up
        rows = min(w.size(0), -(-needed // 64) * 64)
        taken.append(w[:rows])
        total += rows * row_bytes
    return taken


def stream_bytes(shapes: int) -> int:
    """Bytes of each of `shapes` shapes' matrices to time at one row: together twice the last-level
    cache, so that each timing reads from memory as a real step does."""
    return max(2 * last_level_cache() // max(shapes, 1), STREAM_FLOOR)


def last_level_cache() -> int:
    """Bytes of the largest CPU cache sysfs lists for cpu0 (LLC_FALLBACK where it lists none)."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            match = re.fullmatch(r"(\d+)([KMG]?)", entry.read_text().strip())
        except OSError:
            continue
        if match:
            sizes.append(int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[match[2]])
    return max(sizes, default=LLC_FALLBACK)
