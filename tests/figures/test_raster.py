"""PNG writing: any (H, W, 3) uint8 array round-trips through a valid PNG; anything else is refused."""

import numpy as np
import pytest

from lmlab.figures import write_png
from png_files import read_png


def test_write_png_round_trips_pixels(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, size=(7, 5, 3), dtype=np.uint8)
    path = write_png(tmp_path / "x.png", rgb)
    assert np.array_equal(read_png(path), rgb)


def test_write_png_rejects_non_rgb_uint8(tmp_path):
    with pytest.raises(ValueError, match="uint8"):
        write_png(tmp_path / "x.png", np.zeros((4, 4, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        write_png(tmp_path / "x.png", np.zeros((4, 4), dtype=np.uint8))
