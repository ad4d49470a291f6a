"""The component builder: a `ModelConfig` in, a `TransformerDecoder` out.

Every family (GPT-2, Llama, …) is a choice of parts; this function picks them from the config
and wires them together. Initialisation follows GPT-2: N(0, 0.02), with the projections that
write into the residual stream scaled by 1/sqrt(2 * n_layers).
"""

import math

import torch
from torch import nn

from lmlab.config import ModelConfig
from lmlab.modules.attention import SelfAttention
from lmlab.modules.efficient_attention import attention_core
from lmlab.modules.feed_forward import GeluMLP, SwiGLU
from lmlab.modules.norms import LayerNorm, RMSNorm
from lmlab.modules.positions import LearnedPositions, RotaryEmbedding, SinusoidalPositions
from lmlab.modules.transformer import PostNormBlock, PreNormBlock, TransformerDecoder


def build_decoder(cfg: ModelConfig) -> TransformerDecoder:
    """A freshly initialised decoder-only transformer for `cfg`."""
    def norm() -> nn.Module:
        return LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.norm == "layernorm" else RMSNorm(cfg.d_model, cfg.norm_eps)

    def feed_forward() -> nn.Module:
        return GeluMLP(cfg.d_model, cfg.d_ff, cfg.bias) if cfg.ffn == "gelu" else SwiGLU(cfg.d_model, cfg.d_ff, cfg.bias)

    block_cls = PreNormBlock if cfg.norm_placement == "pre" else PostNormBlock
    blocks = [
        block_cls(SelfAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.bias, cfg.dropout,
                                core=attention_core(cfg, causal=True, layer=i)),
                  feed_forward(), norm(), norm(), cfg.dropout)
        for i in range(cfg.n_layers)
    ]
    positions = {
        "learned": lambda: LearnedPositions(cfg.context_length, cfg.d_model),
        "sinusoidal": lambda: SinusoidalPositions(cfg.context_length, cfg.d_model),
        "rope": lambda: None,
    }[cfg.positions]()
    rotary = RotaryEmbedding(cfg.head_dim, cfg.context_length, cfg.rope_base) if cfg.positions == "rope" else None
    # an empty weight skips nn.Embedding's own init (ours follows); on the meta device that init
    # would import torch._dynamo, two seconds of a model load
    embedding = nn.Embedding(cfg.vocab_size, cfg.d_model, _weight=torch.empty(cfg.vocab_size, cfg.d_model))
    lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
    final_norm = norm() if cfg.norm_placement == "pre" else nn.Identity()
    model = TransformerDecoder(embedding, blocks, final_norm, lm_head, positions, rotary, cfg.dropout)
    model.config = cfg
    if model.token_embedding.weight.device.type != "meta":  # a meta model is built to receive loaded weights
        _init_weights(model, cfg.n_layers)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.token_embedding.weight
    return model


@torch.no_grad()
def _init_weights(model: nn.Module, n_layers: int) -> None:
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.zero_()
        elif "norm" in name:
            p.fill_(1.0)
        elif name.endswith(("attention.out.weight", "feed_forward.down.weight")):
            p.normal_(0.0, 0.02 / math.sqrt(2 * n_layers))
        else:
            p.normal_(0.0, 0.02)
