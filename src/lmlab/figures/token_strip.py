"""Per-token scores drawn over the tokens themselves, as a self-contained HTML page or a PNG strip.

Each token sits in a box shaded by its score: red for positive, blue for negative, white for zero,
full colour at the largest |score| of the text. Unsigned scores (gradient norms) are all red. The
PNG uses the figures' bitmap font (ASCII; other characters draw as "?") and wraps long texts.
"""

import html
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lmlab.figures.font import CAP_HEIGHT, draw_text, text_width
from lmlab.figures.raster import INK, WHITE, canvas, fill, write_png
from lmlab.figures.ticks import format_number
from lmlab.io.atomic import atomic_write_text

_RED, _BLUE = np.array((214, 39, 40), dtype=float), np.array((31, 119, 180), dtype=float)
_MAX_WIDTH = 1200  # pixels: the strip wraps to a new line of boxes beyond this
_PAD, _GAP, _SCALE = 4, 3, 2  # pixels around a token's text, between boxes; font scale of tokens


def token_colours(scores: Sequence[float]) -> np.ndarray:
    """(T, 3) uint8 RGB: white blended towards red (score > 0) or blue (score < 0) by |score| / max |score|."""
    values = np.asarray(scores, dtype=float)
    top = np.abs(values).max() if len(values) else 0.0
    shade = np.abs(values) / top if top > 0 else np.zeros_like(values)  # (T,) in [0, 1]
    ends = np.where(values[:, None] >= 0, _RED, _BLUE)  # (T, 3)
    return (np.array(WHITE, dtype=float) + shade[:, None] * (ends - WHITE)).round().astype(np.uint8)


def token_html(tokens: Sequence[str], scores: Sequence[float], title: str) -> str:
    """One HTML page (no external files) showing each token on its colour; hovering shows the score."""
    spans = "".join(
        f'<span style="background:rgb({r},{g},{b})" title="{score:+.4g}">{html.escape(token)}</span>'
        for token, score, (r, g, b) in zip(tokens, scores, token_colours(scores).tolist()))
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + html.escape(title) + "</title>"
            "<style>body{font-family:sans-serif;margin:2em}"
            ".text{font-family:monospace;font-size:1.3em;white-space:pre-wrap;line-height:1.8}"
            ".text span{padding:2px 0;border-right:1px solid #ddd}</style></head>\n"
            f"<body><h3>{html.escape(title)}</h3>\n<div class=\"text\">{spans}</div>\n"
            "<p>red: the token raises the score, blue: it lowers it; hover a token for its value</p>"
            "</body></html>\n")


def save_token_html(path: str | os.PathLike, tokens: Sequence[str], scores: Sequence[float], title: str) -> Path:
    """Write `token_html` to `path`, atomically."""
    atomic_write_text(path, token_html(tokens, scores, title))
    return Path(path)


def token_strip_image(tokens: Sequence[str], scores: Sequence[float], title: str) -> np.ndarray:
    """(H, W, 3) uint8: the title, then a box per token shaded by its score with the score below it."""
    colours = token_colours(scores)
    labels = [token.replace("\n", "\\n").replace("\t", "\\t") for token in tokens]
    score_text = [format_number(float(s)) for s in scores]
    box_h = 9 * _SCALE + 2 * _PAD  # glyphs are 9 rows, descenders included
    row_h = box_h + CAP_HEIGHT + 10  # box, then its score
    widths = [max(text_width(label, _SCALE), text_width(text, 1)) + 2 * _PAD
              for label, text in zip(labels, score_text)]
    margin, top = 10, 10 + 2 * CAP_HEIGHT + 12
    places, x, y = [], margin, top  # (x, y) of each box, wrapping at _MAX_WIDTH
    for w in widths:
        if x > margin and x + w > _MAX_WIDTH - margin:
            x, y = margin, y + row_h
        places.append((x, y))
        x += w + _GAP
    width = max(max(px + w for (px, _), w in zip(places, widths)) + margin, text_width(title, 2) + 2 * margin)
    img = canvas(y + row_h + margin, width)
    draw_text(img, title, width // 2, margin, INK, 2, anchor="center")
    for (px, py), w, label, text, colour in zip(places, widths, labels, score_text, colours):
        fill(img, px, py, px + w, py + box_h, tuple(int(c) for c in colour))
        ink = WHITE if colour.astype(int).sum() < 3 * 140 else INK  # light text on dark boxes
        draw_text(img, label, px + _PAD, py + _PAD, ink, _SCALE)
        draw_text(img, text, px + w // 2, py + box_h + 4, INK, 1, anchor="center")
    return img


def save_token_strip(path: str | os.PathLike, tokens: Sequence[str], scores: Sequence[float], title: str) -> Path:
    """Draw `token_strip_image` and save it as a PNG, atomically."""
    return write_png(path, token_strip_image(tokens, scores, title))
