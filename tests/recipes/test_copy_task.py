"""The copy-task recipe: a decoder learns to copy with full attention but not with a window shorter than the
distance to copy from."""

import pytest

from lmlab.config import PRESETS, LoopConfig, OptimConfig
from lmlab.recipes.copy_task import CopyTaskConfig, train_copy

pytestmark = pytest.mark.usefixtures("one_thread")


def test_full_attention_learns_to_copy_and_a_short_window_cannot(tmp_path):
    """Copying from 17 tokens back: full attention gets nearly every symbol right after 150 steps; a window of 8
    cannot see the source and stays near chance (1/8)."""
    model = PRESETS["llama-tiny"].replace(n_layers=2, d_model=64, n_heads=2, n_kv_heads=None, d_ff=128,
                                          attention_window=8)
    cfg = CopyTaskConfig(length=32, symbols=8, loop=LoopConfig(max_steps=150, batch_size=16),
                         optim=OptimConfig(lr=3e-3, warmup_steps=15))
    full = train_copy(model, cfg, tmp_path / "full", device="cpu", show_progress=False)
    window = train_copy(model.replace(attention="window"), cfg, tmp_path / "window", device="cpu",
                        show_progress=False)
    assert full["val_copy_accuracy"] > 0.9 and window["val_copy_accuracy"] < 0.3, (full, window)
