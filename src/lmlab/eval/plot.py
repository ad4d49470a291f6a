"""Line charts as PNG files, drawn with numpy alone.

Training curves must be viewable without matplotlib or PIL, so this module rasterises a chart
into an (H, W, 3) uint8 array (axes, grid, tick labels, title, legend, lines) with its own
5x7 bitmap font, and `write_png` encodes any such array with zlib and struct.
"""

import math
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lmlab.io.atomic import atomic_path

# --- font ---------------------------------------------------------------------------------
# Each glyph is up to 9 rows of 5 pixels, written as hex bytes (bit 4 is the leftmost pixel).
# Rows 0-6 sit on the baseline; rows 7-8 hold descenders (g, j, p, q, y, comma, underscore).
# Characters not in the table draw as "?".
_GLYPH_HEX = {
    " ": "", "0": "0e11131519110e", "1": "040c040404040e", "2": "0e11010204081f",
    "3": "1e01010e01011e", "4": "02060a121f0202", "5": "1f101e0101110e", "6": "0608101e11110e",
    "7": "1f010204080808", "8": "0e11110e11110e", "9": "0e11110f01020c",
    "A": "0e11111f111111", "B": "1e11111e11111e", "C": "0e11101010110e", "D": "1c12111111121c",
    "E": "1f10101e10101f", "F": "1f10101e101010", "G": "0e11101711110f", "H": "1111111f111111",
    "I": "0e04040404040e", "J": "0702020202120c", "K": "11121418141211", "L": "1010101010101f",
    "M": "111b1515111111", "N": "11111915131111", "O": "0e11111111110e", "P": "1e11111e101010",
    "Q": "0e11111115120d", "R": "1e11111e141211", "S": "0f10100e01011e", "T": "1f040404040404",
    "U": "1111111111110e", "V": "11111111110a04", "W": "1111111515150a", "X": "11110a040a1111",
    "Y": "11110a04040404", "Z": "1f01020408101f",
    "a": "00000e010f110f", "b": "1010161911111e", "c": "00000e1010110e", "d": "01010d1311110f",
    "e": "00000e111f100e", "f": "0609081c080808", "g": "00000f1111110f010e",
    "h": "10101619111111", "i": "04000c0404040e", "j": "02000602020202120c",
    "k": "10101214181412", "l": "0c040404040403", "m": "00001a15151515", "n": "00001619111111",
    "o": "00000e1111110e", "p": "00001e1111111e1010", "q": "00000f1111110f0101",
    "r": "00001619101010", "s": "00000f100e011e", "t": "08081c08080906", "u": "0000111111130d",
    "v": "00001111110a04", "w": "0000111115150a", "x": "0000110a040a11",
    "y": "0000111111110f010e", "z": "00001f0204081f",
    ".": "00000000000c0c", ",": "00000000000c0c0408", "-": "0000000e000000",
    "+": "0004041f040400", "/": "01010204081010", "(": "02040808080402", ")": "08040202020408",
    ":": "000c0c000c0c00", ";": "000c0c000c0c0408", "_": "00000000000000001f",
    "%": "18190204081303",
    "=": "00001f001f0000", "!": "04040404040004", "?": "0e110102040004", "'": "04040800000000",
    '"': "0a0a0000000000", "[": "0e08080808080e", "]": "0e02020202020e", "*": "0004150e150400",
    "<": "02040810080402", ">": "08040201020408", "|": "04040404040404", "#": "0a0a1f0a1f0a0a",
}
_GLYPH_ROWS, _GLYPH_COLS, _ADVANCE, _CAP_HEIGHT = 9, 5, 6, 7


def _glyph(hex_rows: str) -> np.ndarray:
    """Decode one glyph's hex rows into a (9, 5) bool bitmap."""
    rows = bytes.fromhex(hex_rows).ljust(_GLYPH_ROWS, b"\0")
    bits = np.unpackbits(np.frombuffer(rows, dtype=np.uint8)[:, None], axis=1)  # (9, 8)
    return bits[:, 8 - _GLYPH_COLS :].astype(bool)


_FONT = {char: _glyph(hex_rows) for char, hex_rows in _GLYPH_HEX.items()}

# --- colours --------------------------------------------------------------------------------
_WHITE, _INK, _FRAME, _GRID = (255, 255, 255), (33, 33, 33), (90, 90, 90), (228, 228, 228)
_LEGEND_EDGE = (200, 200, 200)
_PALETTE = [
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
]


# --- PNG ------------------------------------------------------------------------------------
def write_png(path: str | os.PathLike, rgb: np.ndarray) -> Path:
    """Write an (H, W, 3) uint8 image to `path` as an 8-bit RGB PNG, atomically.

    Plain zlib + struct, so any array (a chart, an attention map) can be saved without an
    imaging library; readers never see a half-written file.
    """
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8 or 0 in rgb.shape:
        raise ValueError(
            f"write_png needs a non-empty (H, W, 3) uint8 array, got shape {rgb.shape} "
            f"dtype {rgb.dtype}"
        )
    height, width, _ = rgb.shape
    rows = np.zeros((height, 1 + 3 * width), dtype=np.uint8)  # each row: filter byte 0, then RGB
    rows[:, 1:] = rgb.reshape(height, 3 * width)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit, colour type 2 = RGB
    data = (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + _png_chunk(b"IEND", b"")
    )
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    """One PNG chunk: length, type, payload, CRC-32 of type + payload."""
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


# --- raster primitives ----------------------------------------------------------------------
def _fill(img: np.ndarray, x0: int, y0: int, x1: int, y1: int, color) -> None:
    """Fill the pixel rectangle [x0, x1) x [y0, y1), clipped to the image."""
    height, width, _ = img.shape
    img[max(y0, 0) : min(y1, height), max(x0, 0) : min(x1, width)] = color


def _text_mask(text: str, scale: int) -> np.ndarray:
    """Render `text` into a bool mask of shape (9 * scale, 6 * scale * len(text) - scale)."""
    glyphs = [_FONT.get(char, _FONT["?"]) for char in text]
    gap = np.zeros((_GLYPH_ROWS, _ADVANCE - _GLYPH_COLS), dtype=bool)
    mask = np.concatenate([part for g in glyphs for part in (g, gap)][:-1], axis=1)
    return mask.repeat(scale, axis=0).repeat(scale, axis=1)


def _text_width(text: str, scale: int) -> int:
    """Pixel width of `text` drawn at `scale`."""
    return max(len(text) * _ADVANCE - 1, 0) * scale


def _blit(img: np.ndarray, mask: np.ndarray, x: int, y: int, color) -> None:
    """Paint `color` wherever `mask` is set, with the mask's top-left corner at (x, y)."""
    height, width, _ = img.shape
    top, left = max(y, 0), max(x, 0)
    bottom, right = min(y + mask.shape[0], height), min(x + mask.shape[1], width)
    if top < bottom and left < right:
        region = img[top:bottom, left:right]
        region[mask[top - y : bottom - y, left - x : right - x]] = color


def _draw_text(img, text: str, x: int, y: int, color, scale: int, anchor: str = "left") -> None:
    """Draw `text` with its cap-height box's top at `y`; `anchor` places x at left/center/right."""
    if not text:
        return
    shift = {"left": 0, "center": _text_width(text, scale) // 2, "right": _text_width(text, scale)}
    _blit(img, _text_mask(text, scale), x - shift[anchor], y, color)


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


# --- ticks and number labels ----------------------------------------------------------------
def _format_number(value: float, digits: int = 3) -> str:
    """Short label for a tick: 1.2k, 3.5M, 250, 0.01, 2e-5."""
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= size:
            return f"{value / size:.{digits}g}{suffix}"
    if magnitude >= 1e-3:
        return f"{value:.{digits}g}"
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def _tick_labels(ticks: list[float]) -> list[str]:
    """Format ticks with the fewest significant digits (3 or more) that keeps labels distinct."""
    for digits in range(3, 10):
        labels = [_format_number(t, digits) for t in ticks]
        if len(set(labels)) == len(labels):
            return labels
    return labels


def _linear_ticks(lo: float, hi: float, target: int) -> list[float]:
    """About `target` round ticks in [lo, hi], spaced 1, 2, 2.5 or 5 times a power of ten."""
    raw = (hi - lo) / max(target, 1)
    power = 10 ** math.floor(math.log10(raw))
    steps = [m * power for m in (10, 5, 2.5, 2, 1)]
    step = min(steps, key=lambda st: abs((hi - lo) / st - target))  # ties go to the larger step
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def _log_ticks(lo: float, hi: float, target: int) -> list[float]:
    """Ticks for a log10 axis spanning exponents [lo, hi], returned as log10 positions.

    Under a decade round linear values are used; up to three decades add 2 and 5 between powers
    of ten; wider spans label every k-th power of ten.
    """
    if hi - lo < 1:
        ticks = _linear_ticks(10**lo, 10**hi, target)
        return [math.log10(t) for t in ticks if t > 0]
    if hi - lo <= 3:
        multiples, every = (1, 2, 5), 1
    else:
        multiples, every = (1,), math.ceil((hi - lo) / target)
    positions = [
        e + math.log10(m)
        for e in range(math.floor(lo), math.ceil(hi) + 1)
        if e % every == 0
        for m in multiples
    ]
    return [p for p in positions if lo - 1e-9 <= p <= hi + 1e-9]


def _axis_ticks(lo: float, hi: float, target: int, log: bool) -> tuple[list[float], list[str]]:
    """About `target` ticks for an axis over [lo, hi] (log10 positions on a log axis) and their labels."""
    if log:
        ticks = _log_ticks(lo, hi, target)
        return ticks, _tick_labels([10**t for t in ticks])
    ticks = _linear_ticks(lo, hi, target)
    return ticks, _tick_labels(ticks)


def _padded_range(values: np.ndarray, fallback: tuple[float, float]) -> tuple[float, float]:
    """Data range widened by 4% each side (by 1 around a constant) so lines clear the frame."""
    if values.size == 0:
        return fallback
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        return lo - 1, hi + 1
    pad = 0.04 * (hi - lo)
    return lo - pad, hi + pad


# --- the chart --------------------------------------------------------------------------------
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
    x_lo, x_hi = _padded_range(all_x, (0.0, 1.0))
    y_lo, y_hi = _padded_range(all_y, (0.0, 1.0))
    x_ticks, x_labels = _axis_ticks(x_lo, x_hi, max(3, width // (110 * scale)), log_x)
    y_ticks, y_labels = _axis_ticks(y_lo, y_hi, max(3, height // (70 * scale)), log_y)

    # Layout: margins grow with what sits in them (title, labels, the widest tick label).
    s = scale
    title_h = (_CAP_HEIGHT * 2 * s + 12 * s) if title else 0
    top = 12 * s + title_h
    left = 10 * s + (_CAP_HEIGHT * s + 10 * s if ylabel else 0)
    left += max(_text_width(label, s) for label in y_labels) + 8 * s
    bottom = height - 12 * s - _CAP_HEIGHT * s - 8 * s - (_GLYPH_ROWS * s + 8 * s if xlabel else 0)
    right = width - max(16 * s, _text_width(x_labels[-1], s) // 2 + 6 * s)
    box = (left, top, right, bottom)

    def to_px(x, y):  # data -> pixel centres; y grows downward in the image
        px = left + (np.asarray(x) - x_lo) / (x_hi - x_lo) * (right - left - 1)
        py = top + (y_hi - np.asarray(y)) / (y_hi - y_lo) * (bottom - top - 1)
        return np.rint(px).astype(int), np.rint(py).astype(int)

    img = np.full((height, width, 3), _WHITE, dtype=np.uint8)
    label_mid = (_CAP_HEIGHT * s) // 2
    for tick, label in zip(x_ticks, x_labels):
        px = int(to_px(tick, y_lo)[0])
        _fill(img, px, top, px + 1, bottom, _GRID)
        _fill(img, px, bottom, px + 1, bottom + 4 * s, _FRAME)
        _draw_text(img, label, px, bottom + 8 * s, _INK, s, anchor="center")
    for tick, label in zip(y_ticks, y_labels):
        py = int(to_px(x_lo, tick)[1])
        _fill(img, left, py, right, py + 1, _GRID)
        _fill(img, left - 4 * s, py, left, py + 1, _FRAME)
        _draw_text(img, label, left - 7 * s, py - label_mid, _INK, s, anchor="right")

    before = img.copy()
    for (xs, ys), color in zip(points.values(), _colors(len(points))):
        if len(xs):
            _draw_polyline(img, *to_px(xs, ys), color, box, s)
    ink = (img != before).any(axis=2)  # (H, W) pixels covered by data lines

    _draw_frame(img, box)
    _draw_text(img, title, (left + right) // 2, 12 * s, _INK, 2 * s, anchor="center")
    if xlabel:
        y = bottom + 8 * s + _CAP_HEIGHT * s + 10 * s
        _draw_text(img, xlabel, (left + right) // 2, y, _INK, s, anchor="center")
    if ylabel:
        mask = np.rot90(_text_mask(ylabel, s))  # reads bottom to top
        _blit(img, mask, 10 * s, (top + bottom) // 2 - mask.shape[0] // 2, _INK)
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
    return [_PALETTE[i % len(_PALETTE)] for i in range(n)]


def _draw_frame(img, box) -> None:
    """Draw the 1 px axes rectangle around the plot area."""
    left, top, right, bottom = box
    _fill(img, left - 1, top - 1, right + 1, top, _FRAME)
    _fill(img, left - 1, bottom, right + 1, bottom + 1, _FRAME)
    _fill(img, left - 1, top - 1, left, bottom + 1, _FRAME)
    _fill(img, right, top - 1, right + 1, bottom + 1, _FRAME)


def _draw_legend(img, names: list[str], colors, box, ink: np.ndarray, s: int) -> None:
    """Draw a boxed legend in the plot corner that hides the fewest data pixels."""
    left, top, right, bottom = box
    swatch, pad, row = 18 * s, 6 * s, 13 * s
    legend_w = swatch + 6 * s + max(_text_width(n, s) for n in names) + 2 * pad
    legend_h = row * len(names) - (row - _CAP_HEIGHT * s) + 2 * pad
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
    _fill(img, x, y, x + legend_w, y + legend_h, _LEGEND_EDGE)
    _fill(img, x + 1, y + 1, x + legend_w - 1, y + legend_h - 1, _WHITE)
    for i, (name, color) in enumerate(zip(names, colors)):
        row_y = y + pad + i * row
        mid = row_y + (_CAP_HEIGHT * s) // 2
        _fill(img, x + pad, mid - s, x + pad + swatch, mid + s + 1, color)
        _draw_text(img, name, x + pad + swatch + 6 * s, row_y, _INK, s)
