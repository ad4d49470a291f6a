"""The component builder: an `EncoderDecoderConfig` in, an `EncoderDecoder` out.

Each family is a choice of parts (see config.py); this function picks them and wires them. The
weights start as in BART / the original Transformer: N(0, 0.02) linear and embedding weights,
zero biases, unit norms; T5's own initialisation is left to its trained checkpoints.
"""

import math

import torch
from torch import nn

from lmlab.models.encoder_decoder.config import EncoderDecoderConfig
from lmlab.models.encoder_decoder.model import EncoderDecoder
from lmlab.modules.attention import CrossAttention, SelfAttention
from lmlab.modules.encoder_decoder import (
    DecoderStack,
    EncoderStack,
    PostNormDecoderBlock,
    PreNormDecoderBlock,
    SequenceEmbeddings,
)
from lmlab.modules.feed_forward import MLP, GatedMLP
from lmlab.modules.norms import LayerNorm, RMSNorm
from lmlab.modules.positions import LearnedPositions, SinusoidalPositions
from lmlab.modules.relative_position import RelativePositionBias
from lmlab.modules.transformer import PostNormBlock, PreNormBlock
from lmlab.modules.unpadding import UnpaddedSelfAttention


def build_encoder_decoder(cfg: EncoderDecoderConfig) -> EncoderDecoder:
    """A freshly initialised encoder-decoder for `cfg`."""
    scale = None if cfg.scaled_attention else 1.0

    def norm() -> nn.Module:
        return LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.norm == "layernorm" else RMSNorm(cfg.d_model, cfg.norm_eps)

    def self_attention() -> SelfAttention:
        return SelfAttention(cfg.d_model, cfg.n_heads, None, cfg.bias, cfg.dropout, cfg.head_dim, scale)

    def unpadded_self_attention() -> UnpaddedSelfAttention:  # the encoder's, over its real tokens only
        return UnpaddedSelfAttention(cfg.d_model, cfg.n_heads, cfg.bias, cfg.dropout, cfg.head_dim, scale)

    def feed_forward() -> nn.Module:
        return (GatedMLP if cfg.gated_ffn else MLP)(cfg.d_model, cfg.d_ff, cfg.bias, cfg.activation)

    def embeddings(max_len: int) -> SequenceEmbeddings:
        positions = {"sinusoidal": lambda: SinusoidalPositions(max_len, cfg.d_model, layout=cfg.sinusoidal_layout),
                     "learned": lambda: LearnedPositions(max_len, cfg.d_model),
                     "relative": lambda: None}[cfg.positions]()
        return SequenceEmbeddings(shared, positions, math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0,
                                  norm() if cfg.embedding_norm else None, cfg.dropout)

    def position_bias(bidirectional: bool) -> RelativePositionBias | None:
        if cfg.positions != "relative":
            return None
        return RelativePositionBias(cfg.n_heads, bidirectional, cfg.relative_buckets, cfg.relative_max_distance)

    pre = cfg.norm_placement == "pre"
    final_norm = norm if pre else nn.Identity
    shared = nn.Embedding(cfg.vocab_size, cfg.d_model, _weight=torch.empty(cfg.vocab_size, cfg.d_model))
    encoder_block, decoder_block = (PreNormBlock, PreNormDecoderBlock) if pre else (PostNormBlock, PostNormDecoderBlock)
    encoder = EncoderStack(
        embeddings(cfg.max_source_length),
        [encoder_block(unpadded_self_attention(), feed_forward(), norm(), norm(), cfg.dropout)
         for _ in range(cfg.n_encoder_layers)],
        final_norm(), position_bias(bidirectional=True))
    decoder = DecoderStack(
        embeddings(cfg.max_target_length),
        [decoder_block(self_attention(),
                       CrossAttention(cfg.d_model, cfg.n_heads, None, cfg.bias, cfg.dropout, cfg.head_dim, scale),
                       feed_forward(), norm(), norm(), norm(), cfg.dropout)
         for _ in range(cfg.n_decoder_layers)],
        final_norm(), position_bias(bidirectional=False))
    model = EncoderDecoder(cfg, shared, encoder, decoder, nn.Linear(cfg.d_model, cfg.vocab_size, bias=False))
    if shared.weight.device.type != "meta":  # a meta model is built to receive loaded weights
        _init_weights(model)
        if cfg.family == "t5":
            _init_t5_weights(model)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.shared.weight
    return model


@torch.no_grad()
def _init_weights(model: EncoderDecoder) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, 0.02)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, 0.02)
        elif isinstance(module, (nn.LayerNorm, RMSNorm)):
            module.weight.fill_(1.0)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()


@torch.no_grad()
def _init_t5_weights(model: EncoderDecoder) -> None:
    """T5's initialisation: embeddings N(0, 1); a linear layer reading n inputs N(0, 1/n), except the
    queries, N(0, 1/(d_model * head_dim)), which stand in for the missing 1/sqrt(head_dim) of the
    scores; position bias tables N(0, 1/d_model)."""
    cfg = model.config
    inner = cfg.n_heads * cfg.attention_head_dim
    model.shared.weight.normal_(0.0, 1.0)
    if not cfg.tie_embeddings:
        model.lm_head.weight.normal_(0.0, 1.0)
    for module in model.modules():
        if isinstance(module, nn.Linear) and module is not model.lm_head:
            module.weight.normal_(0.0, module.in_features ** -0.5)
    for name, module in model.named_modules():
        if name.endswith("attention"):  # queries: the first `inner` rows of qkv, or q
            query = module.qkv.weight[:inner] if hasattr(module, "qkv") else module.q.weight
            query.normal_(0.0, (cfg.d_model * cfg.attention_head_dim) ** -0.5)
        elif name.endswith("position_bias"):
            module.table.weight.normal_(0.0, cfg.d_model ** -0.5)
