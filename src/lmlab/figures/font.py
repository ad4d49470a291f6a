"""The figures' one font: a 5x7 bitmap font of printable ASCII (with descenders), drawn at integer
scales. Characters not in the table draw as "?" (`heatmap.axis_label` maps a token to what it can show).
"""

import numpy as np

from lmlab.figures.raster import Colour, blit

# Each glyph is up to 9 rows of 5 pixels, written as hex bytes (bit 4 is the leftmost pixel).
# Rows 0-6 sit on the baseline; rows 7-8 hold descenders (g, j, p, q, y, comma, underscore).
GLYPH_HEX = {
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
GLYPH_ROWS, GLYPH_COLS, ADVANCE, CAP_HEIGHT = 9, 5, 6, 7


def _glyph(hex_rows: str) -> np.ndarray:
    """Decode one glyph's hex rows into a (9, 5) bool bitmap."""
    rows = bytes.fromhex(hex_rows).ljust(GLYPH_ROWS, b"\0")
    bits = np.unpackbits(np.frombuffer(rows, dtype=np.uint8)[:, None], axis=1)  # (9, 8)
    return bits[:, 8 - GLYPH_COLS :].astype(bool)


FONT = {char: _glyph(hex_rows) for char, hex_rows in GLYPH_HEX.items()}


def text_mask(text: str, scale: int) -> np.ndarray:
    """Render `text` into a bool mask of shape (9 * scale, 6 * scale * len(text) - scale)."""
    glyphs = [FONT.get(char, FONT["?"]) for char in text]
    gap = np.zeros((GLYPH_ROWS, ADVANCE - GLYPH_COLS), dtype=bool)
    mask = np.concatenate([part for g in glyphs for part in (g, gap)][:-1], axis=1)
    return mask.repeat(scale, axis=0).repeat(scale, axis=1)


def text_width(text: str, scale: int) -> int:
    """Pixel width of `text` drawn at `scale`."""
    return max(len(text) * ADVANCE - 1, 0) * scale


def draw_text(img: np.ndarray, text: str, x: int, y: int, colour: Colour, scale: int, anchor: str = "left") -> None:
    """Draw `text` with its cap-height box's top at `y`; `anchor` places x at left/center/right."""
    if not text:
        return
    shift = {"left": 0, "center": text_width(text, scale) // 2, "right": text_width(text, scale)}
    blit(img, text_mask(text, scale), x - shift[anchor], y, colour)
