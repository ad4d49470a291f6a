"""Fresh encoder-decoder weights: T5 starts as T5 does, BART and the Transformer with N(0, 0.02)."""

from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.presets import preset


def test_fresh_t5_weights_follow_t5s_initialisation_so_scores_and_logits_are_not_near_zero():
    model = build_encoder_decoder(preset("t5-tiny"))
    d, inner = model.config.d_model, model.config.n_heads * model.config.attention_head_dim
    qkv = model.encoder.blocks[0].attention.qkv.weight
    assert abs(model.shared.weight.std().item() - 1.0) < 0.05
    assert abs(qkv[:inner].std().item() - (d * model.config.attention_head_dim) ** -0.5) < 0.002
    assert abs(qkv[inner:].std().item() - d ** -0.5) < 0.005
    assert abs(model.decoder.position_bias.table.weight.std().item() - d ** -0.5) < 0.03
    assert abs(build_encoder_decoder(preset("bart-tiny")).shared.weight.std().item() - 0.02) < 0.002
