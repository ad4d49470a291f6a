"""Llama <-> Hugging Face `LlamaForCausalLM`: config fields and tensor names.

HF keeps q/k/v and gate/up as separate matrices; we stack them (one matmul each), so loading
concatenates along the output dimension and saving splits them again.
"""

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.io.hf import check_fixed_keys, hf_keys, same_value
from lmlab.models.layer_names import layers_from_hf, layers_to_hf

_LAYER = {  # lmlab name (after blocks.{i}.) -> HF name (after model.layers.{i}.)
    "norm1.weight": "input_layernorm.weight",
    "attention.out.weight": "self_attn.o_proj.weight",
    "norm2.weight": "post_attention_layernorm.weight",
    "feed_forward.down.weight": "mlp.down_proj.weight",
}
_HF_LAYER = "model.layers.{i}."  # the HF prefix of layer i
_STACKED = {  # lmlab name -> HF names stacked along dim 0, in order
    "attention.qkv.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "feed_forward.gate_up.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
}
_TOP = {"token_embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}


# The keys of an HF Llama config.json that change what LlamaForCausalLM computes, beyond the sizes
# config_from_hf maps (vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, max_position_embeddings, rms_norm_eps, rope_theta / rope_parameters,
# tie_word_embeddings): each must hold a value lmlab's Llama computes, the first being transformers' default.
# head_dim and rope_parameters are checked in check_hf_keys. Keys that change nothing at inference
# (attention_dropout, pretraining_tp (the same matmuls, split), initializer_range, use_cache, the token
# ids, dtype) are ignored, as is every key LlamaForCausalLM does not read (sliding_window among them).
FIXED_KEYS = {"hidden_act": ("silu",), "attention_bias": (False,), "mlp_bias": (False,), "rope_scaling": (None, {})}
_PLAIN_ROPE = {"rope_type", "rope_theta"}  # the keys of rope_parameters for unscaled RoPE


def config_from_hf(hf: dict) -> ModelConfig:
    """Our config for an HF Llama `config.json` dict; a key whose value lmlab does not compute is refused."""
    check_hf_keys(hf)
    hf = hf_keys(hf)
    return ModelConfig(
        family="llama", vocab_size=hf["vocab_size"], context_length=hf["max_position_embeddings"],
        n_layers=hf["num_hidden_layers"], n_heads=hf["num_attention_heads"],
        n_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"], d_model=hf["hidden_size"],
        d_ff=hf["intermediate_size"], norm="rmsnorm", norm_eps=hf.get("rms_norm_eps", 1e-6), ffn="swiglu",
        positions="rope", rope_base=float(hf.get("rope_theta", 10000.0)), bias=False,
        tie_embeddings=hf.get("tie_word_embeddings", False),
    )


def check_hf_keys(hf: dict) -> None:
    """Refuse an HF Llama config.json whose computation keys lmlab cannot honour: `FIXED_KEYS`, a head_dim
    other than hidden_size / num_attention_heads, scaled RoPE, two RoPE bases that disagree."""
    check_fixed_keys(hf, FIXED_KEYS, "llama")
    head_dim, width, heads = hf.get("head_dim"), hf.get("hidden_size"), hf.get("num_attention_heads")
    if head_dim is not None and (not isinstance(width, int) or not isinstance(heads, int) or heads < 1
                                 or not same_value(head_dim, width // heads)):
        raise LmlabError(f"head_dim={head_dim!r} is not hidden_size / num_attention_heads ({width} / {heads}); "
                         "lmlab's Llama has no separate head size")
    params = hf.get("rope_parameters")
    if params is None:
        return
    plain = isinstance(params, dict) and set(params) <= _PLAIN_ROPE and params.get("rope_type", "default") == "default"
    if not plain:
        raise LmlabError(f"rope_parameters {params!r} is not supported yet; only plain RoPE models load")
    if "rope_theta" in hf and "rope_theta" in params and not same_value(hf["rope_theta"], params["rope_theta"]):
        raise LmlabError(f"rope_theta={hf['rope_theta']!r} disagrees with rope_parameters' rope_theta="
                         f"{params['rope_theta']!r}; fix one of them")


def config_to_hf(cfg: ModelConfig) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.context_length, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff, "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_base, "hidden_act": "silu", "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False, "mlp_bias": False, "attention_dropout": cfg.dropout,
    }


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> our state dict."""
    ours = {k: hf_state[v] for k, v in _TOP.items()}
    ours |= layers_from_hf(hf_state, _HF_LAYER, cfg.n_layers, _LAYER, _STACKED)
    ours["lm_head.weight"] = hf_state["model.embed_tokens.weight"] if cfg.tie_embeddings else hf_state["lm_head.weight"]
    return ours


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors (the tied LM head is left out, as HF saves it)."""
    hf = {v: state[k] for k, v in _TOP.items()}
    kv_dim = (cfg.n_kv_heads or cfg.n_heads) * cfg.head_dim
    sizes = {"attention.qkv.weight": [cfg.d_model, kv_dim, kv_dim], "feed_forward.gate_up.weight": [cfg.d_ff, cfg.d_ff]}
    hf |= layers_to_hf(state, _HF_LAYER, cfg.n_layers, _LAYER, _STACKED, sizes)
    if not cfg.tie_embeddings:
        hf["lm_head.weight"] = state["lm_head.weight"]
    return hf
