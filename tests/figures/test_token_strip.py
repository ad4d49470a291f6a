"""Token strips: per-token scores as colours, an HTML page and a PNG strip that wraps."""

import numpy as np

from lmlab.figures import token_colours, token_html, token_strip_image


def test_colours_are_red_for_positive_blue_for_negative_and_full_at_the_largest():
    colours = token_colours([2.0, -1.0, 0.0]).tolist()
    assert colours[0] == [214, 39, 40] and colours[2] == [255, 255, 255]
    assert colours[1][2] > colours[1][0]  # half-way to blue


def test_html_escapes_tokens_and_needs_no_other_file():
    page = token_html(["<script>", " a&b", '"q"'], [1.0, -0.5, 0.1], "log p('<x>')")
    assert "<script>" not in page and "&lt;script&gt;" in page and " a&amp;b" in page and "&quot;q&quot;" in page
    assert "&lt;x&gt;" in page and "src=" not in page and "href=" not in page


def test_png_strip_wraps_long_texts_onto_more_rows():
    short = token_strip_image(["a", "b"], [1.0, -1.0], "t")
    long = token_strip_image([" token"] * 60, [0.5] * 60, "t")
    assert short.dtype == np.uint8 and short.ndim == 3
    assert long.shape[0] > short.shape[0] and long.shape[1] <= 1200
    assert (short == [214, 39, 40]).all(-1).any() and (short == [31, 119, 180]).all(-1).any()
