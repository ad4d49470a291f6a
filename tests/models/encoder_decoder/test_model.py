"""The shared encoder-decoder stack: cached decoding equals the full pass, causality, padding."""

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.config import ENCODER_DECODER_PRESETS
from lmlab.models.presets import preset
from lmlab.modules.relative_position import relative_buckets

FAMILIES = ["transformer-tiny", "t5-tiny", "bart-tiny"]


def tiny(name: str):
    torch.manual_seed(0)
    cfg = preset(name, vocab_size=50, d_model=32, d_ff=64, max_source_length=16, max_target_length=12)
    return build_encoder_decoder(cfg).eval()


def batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 50, (2, 7), generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    return src, mask, torch.randint(3, 50, (2, 6), generator=g)


@pytest.mark.parametrize("name", FAMILIES)
def test_cached_decoding_one_token_at_a_time_equals_the_full_pass(name):
    model = tiny(name)
    src, mask, tgt = batch()
    full = model(src, mask, tgt)  # (B, T, V)
    memory_kv = model.memory_kv(model.encode(src, mask))
    cache = model.new_cache(2)
    steps = torch.cat([model.decode(tgt[:, i:i + 1], memory_kv, mask, kv_cache=cache) for i in range(tgt.size(1))], 1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_target_token_never_changes_the_logits_before_it(name):
    model = tiny(name)
    src, mask, tgt = batch()
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] + 1) % 50
    torch.testing.assert_close(model(src, mask, changed)[:, :4], model(src, mask, tgt)[:, :4])


@pytest.mark.parametrize("name", FAMILIES)
def test_source_padding_is_ignored(name):
    model = tiny(name)
    src, mask, tgt = batch()
    alone = model(src[1:, :5], None, tgt[1:])
    garbage = src.clone()
    garbage[1, 5:] = 7
    torch.testing.assert_close(model(garbage, mask, tgt)[1:], alone, atol=1e-5, rtol=1e-5)
    assert not model.encode(garbage, mask)[1, 5:].any()  # the encoder skipped the padding: zeros there


def test_a_source_longer_than_the_encoder_reads_is_one_clear_error():
    model = tiny("bart-tiny")
    with pytest.raises(LmlabError, match="at most 16"):
        model.encode(torch.ones(1, 17, dtype=torch.long))


def test_relative_buckets_are_exact_near_and_logarithmic_far():
    offsets = torch.arange(-200, 201)
    both = relative_buckets(offsets, bidirectional=True, n_buckets=32, max_distance=128)
    assert both[200 - 7] == 7 and both[200 + 7] == 16 + 7  # exact below 8, keys to the right in the upper half
    assert both.max() == 31 and both[:200].max() == 15
    left = relative_buckets(offsets, bidirectional=False, n_buckets=32, max_distance=128)
    assert (left[200:] == 0).all()  # a decoder never sees keys to its right
    assert torch.equal(left[:201].flip(0)[:16], torch.arange(16))
    assert (left[:201].flip(0).diff() >= 0).all() and left.max() == 31  # monotone, saturating


def test_presets_build_and_tie_their_head():
    for name, cfg in ENCODER_DECODER_PRESETS.items():
        if cfg.d_model <= 128:
            model = build_encoder_decoder(cfg)
            assert (model.lm_head.weight is model.shared.weight) == cfg.tie_embeddings, name
