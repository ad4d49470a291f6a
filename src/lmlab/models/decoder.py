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
from lmlab.modules.feed_forward import GatedMLP, GeluMLP, SwiGLU
from lmlab.modules.norms import AllHeadsRMSNorm, LayerNorm, RMSNorm
from lmlab.modules.positions import LearnedPositions, RotaryEmbedding, SinusoidalPositions
from lmlab.modules.rope_scaling import RopeScaling
from lmlab.modules.transformer import PostNormBlock, PreNormBlock, TransformerDecoder


def build_decoder(cfg: ModelConfig) -> TransformerDecoder:
    """A freshly initialised decoder-only transformer for `cfg`."""
    def norm(width: int = cfg.d_model) -> nn.Module:
        return LayerNorm(width, eps=cfg.norm_eps) if cfg.norm == "layernorm" else RMSNorm(width, cfg.norm_eps)

    def feed_forward() -> nn.Module:
        if cfg.ffn == "geglu":
            return GatedMLP(cfg.d_model, cfg.d_ff, cfg.bias, "gelu_tanh")
        if cfg.ffn == "gelu":
            return GeluMLP(cfg.d_model, cfg.d_ff, cfg.bias)
        return SwiGLU(cfg.d_model, cfg.d_ff, cfg.bias)

    def attention(i: int) -> SelfAttention:
        q_norm = k_norm = None
        if cfg.qk_norm == "head":
            q_norm, k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps), RMSNorm(cfg.head_dim, cfg.norm_eps)
        elif cfg.qk_norm == "all":
            q_norm = AllHeadsRMSNorm(cfg.n_heads * cfg.head_dim, cfg.norm_eps)
            k_norm = AllHeadsRMSNorm((cfg.n_kv_heads or cfg.n_heads) * cfg.head_dim, cfg.norm_eps)
        return SelfAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.bias, cfg.dropout, cfg.head_dim,
                             cfg.attention_scale, attention_core(cfg, causal=True, layer=i),
                             qkv_bias=cfg.bias or cfg.qkv_bias, q_norm=q_norm, k_norm=k_norm,
                             softcap=cfg.attention_softcap)

    def block(i: int) -> nn.Module:
        if cfg.norm_placement == "post":
            return PostNormBlock(attention(i), feed_forward(), norm(), norm(), cfg.dropout)
        pre = cfg.norm_placement in ("pre", "sandwich")
        post = cfg.norm_placement in ("sandwich", "output")
        return PreNormBlock(attention(i), feed_forward(), norm() if pre else nn.Identity(),
                            norm() if pre else nn.Identity(), cfg.dropout,
                            norm() if post else None, norm() if post else None)

    blocks = [block(i) for i in range(cfg.n_layers)]
    positions = {
        "learned": lambda: LearnedPositions(cfg.context_length, cfg.d_model),
        "sinusoidal": lambda: SinusoidalPositions(cfg.context_length, cfg.d_model),
        "rope": lambda: None,
    }[cfg.positions]()
    rotary = local_rotary = None
    if cfg.positions == "rope":
        rotary = RotaryEmbedding(cfg.head_dim, cfg.context_length, cfg.rope_base, rope_scaling(cfg))
        if cfg.rope_local_base is not None:  # local layers: their own base, never scaled (Gemma 3)
            local_rotary = RotaryEmbedding(cfg.head_dim, cfg.context_length, cfg.rope_local_base)
    # an empty weight skips nn.Embedding's own init (ours follows); on the meta device that init
    # would import torch._dynamo, two seconds of a model load
    embedding = nn.Embedding(cfg.vocab_size, cfg.d_model, _weight=torch.empty(cfg.vocab_size, cfg.d_model))
    lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
    final_norm = norm() if cfg.norm_placement != "post" else nn.Identity()
    model = TransformerDecoder(embedding, blocks, final_norm, lm_head, positions, rotary, cfg.dropout,
                               cfg.d_model ** 0.5 if cfg.scale_embeddings else 1.0, cfg.logit_softcap,
                               tuple(cfg.layer_window(i) for i in range(cfg.n_layers)), local_rotary)
    model.config = cfg
    if model.token_embedding.weight.device.type != "meta":  # a meta model is built to receive loaded weights
        _init_weights(model, cfg.n_layers)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.token_embedding.weight
    return model


def rope_scaling(cfg: ModelConfig) -> RopeScaling | None:
    """The config's RoPE scaling as the rotary table takes it; None when unscaled."""
    if cfg.rope_scaling == "none":
        return None
    return RopeScaling(cfg.rope_scaling, cfg.rope_factor, cfg.rope_original_context, cfg.rope_low_freq_factor,
                       cfg.rope_high_freq_factor, cfg.rope_beta_fast, cfg.rope_beta_slow, cfg.rope_attention_factor)


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
