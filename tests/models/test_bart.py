"""BART: the same weights in lmlab and HF `BartForConditionalGeneration` give the same encoder
output and logits (padded sources, a decoder attention mask), an lmlab model exports to HF exactly,
and cached one-token decoding matches HF's past_key_values."""

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
from lmlab.models.bart import convert
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.presets import preset

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]

PAD = 1


def hf_bart(**overrides):
    config = transformers.BartConfig(**(dict(
        vocab_size=48, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=16,
        pad_token_id=PAD, eos_token_id=2, decoder_start_token_id=2) | overrides))
    return randomized(transformers.BartForConditionalGeneration(config))


@pytest.mark.parametrize("overrides", [{}, {"scale_embedding": True}, {"activation_function": "relu"}],
                         ids=["bart", "scaled-embeddings", "relu"])
def test_hf_weights_in_lmlab_give_equal_encoder_output_and_logits(overrides):
    reference = hf_bart(**overrides)
    encoder_gap, logit_gap = encoder_and_logit_gaps(reference, lmlab_copy(reference, convert), PAD)
    assert encoder_gap <= TOLERANCE["atol"] and logit_gap <= TOLERANCE["atol"], (encoder_gap, logit_gap)


def test_lmlab_weights_load_strictly_into_hf_with_equal_logits():
    torch.manual_seed(0)
    cfg = preset("bart-tiny", vocab_size=48, d_model=16, d_ff=32, n_heads=2, max_source_length=16,
                                 max_target_length=12)
    ours = build_encoder_decoder(cfg).eval()
    with torch.no_grad():
        ours.logits_bias.normal_()
    gap = exported_logit_gap(ours, convert, transformers.BartForConditionalGeneration, PAD)
    assert gap <= TOLERANCE["atol"], gap


def test_cached_decoding_equals_hf_past_key_values():
    reference = hf_bart()
    gap = incremental_logit_gap(reference, lmlab_copy(reference, convert), PAD)
    assert gap <= TOLERANCE["atol"], gap


def test_hf_to_lmlab_to_hf_keeps_every_tensor_that_hf_reads():
    reference = hf_bart()
    cfg = convert.config_from_hf(reference.config.to_dict())
    back = convert.to_hf(convert.from_hf(reference.state_dict(), cfg), cfg)
    expected = reference.state_dict()
    assert set(back) == set(expected)
    for name, tensor in expected.items():
        if name.endswith("embed_positions.weight"):  # rows 0 and 1 are never read (positions start at row 2)
            tensor, back[name] = tensor[convert.POSITION_OFFSET:], back[name][convert.POSITION_OFFSET:]
        assert torch.equal(back[name], tensor), name


def test_config_round_trips_through_hf_fields():
    cfg = preset("bart-base")
    assert convert.config_from_hf(convert.config_to_hf(cfg)) == cfg


def test_unequal_encoder_and_decoder_heads_are_refused_in_one_line():
    hf = convert.config_to_hf(preset("bart-tiny")) | {"decoder_attention_heads": 2}
    with pytest.raises(LmlabError, match="decoder_attention_heads=2"):
        convert.config_from_hf(hf)


def test_a_pre_norm_model_is_refused_as_bart():
    with pytest.raises(LmlabError, match="norm_placement='pre'"):
        convert.config_to_hf(preset("bart-tiny", norm_placement="pre"))
