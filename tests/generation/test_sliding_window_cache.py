"""A model whose every layer attends over a sliding window decodes with a cache of about the window's size
(`KVCache.keep_last`), and gives the tokens a cache of every position gives: through the modules, the fused
int4 step, a left-padded batch, sampling with a seed, beam search, and the serving engine's slots (each row
dropping its own keys at its own length)."""

import pytest
import torch

from lmlab.generation import GenerationConfig, batch, generate_batch
from lmlab.inference import slots
from lmlab.inference.engine import Engine
from lmlab.models.presets import preset
from lmlab.models.quantize import quantize_model
from lmlab.models.registry import build

PROMPTS = [[5, 9, 41, 3, 17, 22, 8], [12, 70]]


def full_cache(monkeypatch):
    """Decoding with the window switched off for the cache only (every position kept): the reference."""
    monkeypatch.setattr(batch, "sliding_window", lambda model: None)


def tiny(window: int = 4):
    """A windowed model whose attention is sharp, so a key or a position out of place changes its tokens (at
    initialisation every score is near 0 and attention near uniform, blind to both)."""
    torch.manual_seed(0)
    model = build(preset("mistral-tiny", vocab_size=97, context_length=96, n_layers=2, d_model=32, n_heads=4,
                         d_ff=64, sliding_window=window)).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attention.qkv.weight.mul_(40.0)
    return model


@pytest.mark.parametrize("quantized", [False, True], ids=["modules", "fused-int4"])
@pytest.mark.parametrize("settings", [dict(), dict(temperature=0.9, top_k=20, seed=3), dict(num_beams=3)],
                         ids=["greedy", "sampled", "beams"])
def test_the_windowed_cache_gives_the_full_caches_tokens(monkeypatch, quantized, settings):
    model = tiny()
    if quantized:
        model = quantize_model(model, "int4")
    config = GenerationConfig(max_new_tokens=40, **settings)
    windowed = [g.token_ids for g in generate_batch(model, PROMPTS, config)]
    with monkeypatch.context() as m:
        full_cache(m)
        assert [g.token_ids for g in generate_batch(model, PROMPTS, config)] == windowed
    assert all(len(ids) == 40 for ids in windowed)


def test_the_cache_stays_the_windows_size(monkeypatch):
    made = []
    monkeypatch.setattr(batch, "new_cache", lambda model, B, max_len: made.append(max_len) or
                        batch.KVCache(model.config.n_layers, B, model.config.n_kv_heads, model.config.head_dim,
                                      max_len))
    generate_batch(tiny(window=4), PROMPTS, GenerationConfig(max_new_tokens=60))
    assert made == [7 + 4]  # the prompt (7 tokens, more than the window) and one window of steps, not 7 + 60


def test_a_model_with_a_global_layer_keeps_every_position():
    model = build(preset("gemma3-tiny", vocab_size=97, context_length=64, n_layers=2, sliding_window=4,
                         global_every=2))
    assert batch.sliding_window(model) is None
    assert batch.sliding_window(tiny(window=4)) == 4


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("quantized", [False, True], ids=["modules", "fused-int4"])
def test_the_engines_slots_keep_what_the_window_reads(monkeypatch, quantized):
    model = tiny()
    if quantized:
        model = quantize_model(model, "int4")
    monkeypatch.setattr(slots, "FIRST_CAPACITY", 8)  # two windows: rows drop keys within a few steps
    prompts = [[5, 9, 41, 3, 17, 22, 8], [12, 70], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [33]]
    configs = [GenerationConfig(max_new_tokens=n) for n in (30, 45, 12, 60)]
    with Engine(model, None, slots=3, prefix_budget=0) as engine:
        requests = [engine.submit(p, c) for p, c in zip(prompts, configs)]
        results = [[t for chunk in r for t in chunk.token_ids] for r in requests]
        assert engine.cache.capacity == 16 and max(engine.cache.offsets) > 0
    with monkeypatch.context() as m:
        full_cache(m)
        assert results == [generate_batch(model, [p], c)[0].token_ids for p, c in zip(prompts, configs)]
