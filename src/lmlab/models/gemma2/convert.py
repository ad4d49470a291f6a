"""Gemma 2 <-> Hugging Face `Gemma2ForCausalLM`: Llama with (1 + w) RMSNorms before and after each sublayer
(the "sandwich"), token embeddings times sqrt(d_model), the tanh-GELU gated feed-forward (GeGLU), queries
scaled by query_pre_attn_scalar ** -0.5, attention scores and final logits soft-capped, and local layers
(a sliding window) alternating with global ones, the first layer local. Gemma 3 is a diff of this one.
"""

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.io.hf import check_fixed_keys
from lmlab.models.llama import convert as llama

# HF's four norms of a layer -> ours: input_layernorm before attention, post_attention_layernorm on its
# output (inside the residual), pre_ and post_feedforward_layernorm around the feed-forward
SANDWICH = {"post_norm1.weight": "post_attention_layernorm.weight", "norm2.weight": "pre_feedforward_layernorm.weight",
            "post_norm2.weight": "post_feedforward_layernorm.weight"}
# HF stores w and computes x (1 + w); our RMSNorm's weight is 1 + w (initialised to 1, so a model trained
# from scratch starts where Gemma's zero-initialised w does, and trains the same)
LAYOUT = llama.LAYOUT.replace(layer=llama.LAYOUT.layer | SANDWICH, norm_offset=1.0)

# What Gemma2ForCausalLM computes beyond the keys read below: each key must hold a value lmlab computes,
# the first being transformers' default (see llama.FIXED_KEYS for the keys that change nothing).
FIXED_KEYS = {"hidden_activation": ("gelu_pytorch_tanh",), "attention_bias": (False,),
              "use_bidirectional_attention": (None, False)}
# transformers' defaults for the keys a Gemma config.json may leave out, where they differ from Llama's
DEFAULTS = {"num_key_value_heads": 4, "head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096,
            "tie_word_embeddings": True, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0}
LOCAL, GLOBAL = "sliding_attention", "full_attention"  # the layer_types of config.json


def config_from_hf(hf: dict) -> ModelConfig:
    check_hf_keys(hf)
    hf = DEFAULTS | hf
    return llama.decoder_config(hf, "gemma2", **gemma_settings(hf, every=2),
                                attention_softcap=hf["attn_logit_softcapping"],
                                logit_softcap=hf["final_logit_softcapping"])


def check_hf_keys(hf: dict) -> None:
    check_fixed_keys(hf, FIXED_KEYS, "gemma2")
    llama.rope_settings(hf)


def gemma_settings(hf: dict, every: int) -> dict:
    """Our settings of what Gemma 2 and 3 share, for config.json `hf` (with `DEFAULTS` filled in); `every`:
    the family's global layer every so many layers when config.json has no `layer_types`."""
    n_layers = hf["num_hidden_layers"]
    global_every = window_pattern(hf.get("layer_types") or layer_types(every, n_layers), n_layers)
    window = hf["sliding_window"]
    if global_every == 1:  # every layer global: no window
        window, global_every = None, 0
    elif window is None:
        raise LmlabError(f"layer_types has {LOCAL} layers but sliding_window is null; set their window")
    return dict(norm_placement="sandwich", ffn="geglu", scale_embeddings=True,
                attention_scale=hf["query_pre_attn_scalar"] ** -0.5, sliding_window=window,
                global_every=global_every)


def window_pattern(types, n_layers: int) -> int:
    """Every how many layers config.json's `layer_types` puts a global layer, the others local (0: none is
    global; 1: all are); any other list is refused: lmlab's local and global layers follow that pattern."""
    if not isinstance(types, list) or len(types) != n_layers or not set(types) <= {LOCAL, GLOBAL}:
        raise LmlabError(f"layer_types must list {LOCAL!r} or {GLOBAL!r} for each of the {n_layers} layers")
    every = types.index(GLOBAL) + 1 if GLOBAL in types else 0
    pattern = layer_types(every, n_layers)
    if types != pattern:
        i = next(i for i, (given, expected) in enumerate(zip(types, pattern)) if given != expected)
        raise LmlabError(f"layer_types makes layer {i} {types[i]!r}, off the pattern its first global layer sets "
                         f"(a global layer every {every}, the rest local), the only one lmlab computes")
    return every


def layer_types(every: int, n_layers: int) -> list[str]:
    """config.json's layer_types for a global layer every `every` layers (0: none), the others local."""
    return [GLOBAL if every and (i + 1) % every == 0 else LOCAL for i in range(n_layers)]


def gemma_to_hf(cfg: ModelConfig, architecture: str, model_type: str) -> dict:
    """The config.json keys Gemma 2 and 3 share. transformers builds both masks whatever the layers, so a
    model without local layers still gets a sliding_window (its context, which no layer uses)."""
    return llama.decoder_config_to_hf(cfg, architecture, model_type) | {
        "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False,
        "query_pre_attn_scalar": round((cfg.attention_scale or cfg.head_dim ** -0.5) ** -2),
        "sliding_window": cfg.sliding_window or cfg.context_length,
        "layer_types": layer_types(cfg.global_every if cfg.sliding_window else 1, cfg.n_layers),
        "final_logit_softcapping": cfg.logit_softcap}


def config_to_hf(cfg: ModelConfig) -> dict:
    return gemma_to_hf(cfg, "Gemma2ForCausalLM", "gemma2") | {"attn_logit_softcapping": cfg.attention_softcap}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_hf(hf_state, cfg, LAYOUT)


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.to_hf(state, cfg, LAYOUT)
