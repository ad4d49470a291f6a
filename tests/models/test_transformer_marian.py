"""The original Transformer against HF `MarianMTModel`: the same weights give the same encoder
output and logits (padded sources, a decoder attention mask), an lmlab Transformer with the
paper's interleaved positions exports to Marian with equal logits, and cached one-token decoding
matches HF's past_key_values."""

import pytest
import torch

from encoder_decoder_parity import (
    TOLERANCE,
    encoder_and_logit_gaps,
    exported_logit_gap,
    incremental_logit_gap,
    lmlab_copy,
    randomized,
)
from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.presets import preset
from lmlab.models.transformer import convert
from lmlab.modules.positions import sinusoidal_table

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]

PAD = 0


def hf_marian(**overrides):
    config = transformers.MarianConfig(**(dict(
        vocab_size=48, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=16,
        pad_token_id=PAD, eos_token_id=1, decoder_start_token_id=PAD, scale_embedding=True,
        activation_function="swish") | overrides))
    return randomized(transformers.MarianMTModel(config))


def tiny_transformer(**overrides):
    torch.manual_seed(0)
    cfg = preset("transformer-tiny", **(dict(vocab_size=48, d_model=16, d_ff=32, n_heads=2,
                                                             max_source_length=16, max_target_length=12) | overrides))
    model = build_encoder_decoder(cfg).eval()
    with torch.no_grad():  # norms and biases away from 1 and 0, so a misplaced channel shows
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.mark.parametrize("overrides", [{}, {"activation_function": "relu", "scale_embedding": False}],
                         ids=["marian", "relu-unscaled"])
def test_hf_weights_in_lmlab_give_equal_encoder_output_and_logits(overrides):
    reference = hf_marian(**overrides)
    encoder_gap, logit_gap = encoder_and_logit_gaps(reference, lmlab_copy(reference, convert), PAD)
    assert encoder_gap <= TOLERANCE["atol"] and logit_gap <= TOLERANCE["atol"], (encoder_gap, logit_gap)


@pytest.mark.parametrize("layout", ["interleaved", "halves"])
def test_lmlab_transformer_loads_strictly_into_marian_with_equal_logits(layout):
    ours = tiny_transformer(sinusoidal_layout=layout)
    gap = exported_logit_gap(ours, convert, transformers.MarianMTModel, PAD)
    assert gap <= TOLERANCE["atol"], gap


def test_interleaved_transformer_comes_back_from_marian_names_unchanged():
    ours = tiny_transformer()
    state = ours.state_dict()
    back = convert.from_hf(convert.to_hf(state, ours.config), ours.config)
    assert set(back) == set(state)
    for name, tensor in state.items():
        assert torch.equal(back[name], tensor), name


def test_cached_decoding_equals_hf_past_key_values():
    reference = hf_marian()
    gap = incremental_logit_gap(reference, lmlab_copy(reference, convert), PAD)
    assert gap <= TOLERANCE["atol"], gap


def test_halves_table_is_marians_and_the_interleaved_one_reordered():
    marian = transformers.MarianMTModel(transformers.MarianConfig(
        vocab_size=8, d_model=10, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=8, decoder_ffn_dim=8, max_position_embeddings=50, pad_token_id=0,
        decoder_start_token_id=0))
    halves = sinusoidal_table(50, 10, layout="halves")
    torch.testing.assert_close(halves, marian.model.encoder.embed_positions.weight, atol=1e-5, rtol=0)
    interleaved = sinusoidal_table(50, 10)
    assert torch.equal(halves, torch.cat([interleaved[:, 0::2], interleaved[:, 1::2]], dim=1))


def test_a_loaded_marian_is_a_transformer_that_saves_as_marian():
    cfg = convert.config_from_hf(hf_marian().config.to_dict())
    assert (cfg.family, cfg.sinusoidal_layout, cfg.activation, cfg.scale_embeddings) == (
        "transformer", "halves", "silu", True)
    assert convert.config_from_hf(convert.config_to_hf(cfg)) == cfg


def test_separate_source_and_target_vocabularies_are_refused_in_one_line():
    hf = convert.config_to_hf(preset("transformer-tiny")) | {"share_encoder_decoder_embeddings": False}
    with pytest.raises(LmlabError, match="share_encoder_decoder_embeddings"):
        convert.config_from_hf(hf)
