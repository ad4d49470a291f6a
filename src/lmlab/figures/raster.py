"""The canvas every figure draws on: an (H, W, 3) uint8 array, its colours, filled rectangles and
masks painted on it, and `write_png`, which encodes any such array with zlib and struct.

Figures must be viewable without matplotlib or PIL (see docs/development.md, "Figures"), so a
picture is a numpy array and a PNG is a few lines of the format's own spec.
"""

import os
import struct
import zlib
from pathlib import Path

import numpy as np

from lmlab.io.atomic import atomic_path

Colour = tuple[int, int, int]

WHITE, INK, FRAME, GRID = (255, 255, 255), (33, 33, 33), (90, 90, 90), (228, 228, 228)
LEGEND_EDGE = (200, 200, 200)
PALETTE = [  # series colours, chosen to stay distinct
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
]


def canvas(height: int, width: int) -> np.ndarray:
    """A white (height, width, 3) uint8 image."""
    return np.full((height, width, 3), WHITE, dtype=np.uint8)


def fill(img: np.ndarray, x0: int, y0: int, x1: int, y1: int, colour: Colour) -> None:
    """Fill the pixel rectangle [x0, x1) x [y0, y1), clipped to the image."""
    height, width, _ = img.shape
    img[max(y0, 0) : min(y1, height), max(x0, 0) : min(x1, width)] = colour


def frame(img: np.ndarray, x0: int, y0: int, x1: int, y1: int) -> None:
    """A 1 px rectangle just outside [x0, x1) x [y0, y1)."""
    fill(img, x0 - 1, y0 - 1, x1 + 1, y0, FRAME)
    fill(img, x0 - 1, y1, x1 + 1, y1 + 1, FRAME)
    fill(img, x0 - 1, y0 - 1, x0, y1 + 1, FRAME)
    fill(img, x1, y0 - 1, x1 + 1, y1 + 1, FRAME)


def blit(img: np.ndarray, mask: np.ndarray, x: int, y: int, colour: Colour) -> None:
    """Paint `colour` wherever the bool `mask` is set, with the mask's top-left corner at (x, y)."""
    height, width, _ = img.shape
    top, left = max(y, 0), max(x, 0)
    bottom, right = min(y + mask.shape[0], height), min(x + mask.shape[1], width)
    if top < bottom and left < right:
        region = img[top:bottom, left:right]
        region[mask[top - y : bottom - y, left - x : right - x]] = colour


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
