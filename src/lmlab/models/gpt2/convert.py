"""GPT-2 <-> Hugging Face `GPT2LMHeadModel`: config fields and tensor names.

HF GPT-2 stores its linear layers as `Conv1D` with weights (in, out), the transpose of
`nn.Linear`; the fused `c_attn` is already Q|K|V stacked, which is our `qkv` layout.
"""

import torch

from lmlab.config import ModelConfig
from lmlab.io.hf import check_fixed_keys

_LAYER = {  # lmlab name (after blocks.{i}.) -> (HF name (after transformer.h.{i}.), transposed)
    "norm1.weight": ("ln_1.weight", False),
    "norm1.bias": ("ln_1.bias", False),
    "attention.qkv.weight": ("attn.c_attn.weight", True),
    "attention.qkv.bias": ("attn.c_attn.bias", False),
    "attention.out.weight": ("attn.c_proj.weight", True),
    "attention.out.bias": ("attn.c_proj.bias", False),
    "norm2.weight": ("ln_2.weight", False),
    "norm2.bias": ("ln_2.bias", False),
    "feed_forward.up.weight": ("mlp.c_fc.weight", True),
    "feed_forward.up.bias": ("mlp.c_fc.bias", False),
    "feed_forward.down.weight": ("mlp.c_proj.weight", True),
    "feed_forward.down.bias": ("mlp.c_proj.bias", False),
}
_TOP = {
    "token_embedding.weight": "transformer.wte.weight",
    "positions.table.weight": "transformer.wpe.weight",
    "norm.weight": "transformer.ln_f.weight",
    "norm.bias": "transformer.ln_f.bias",
}


# The keys of an HF GPT-2 config.json that change what GPT2LMHeadModel computes, beyond the sizes
# config_from_hf maps (vocab_size, n_positions, n_layer, n_head, n_embd, n_inner, layer_norm_epsilon,
# tie_word_embeddings): each must hold a value lmlab's GPT-2 computes, the first being transformers' default.
# Keys that change nothing at inference (the *_pdrop dropouts, reorder_and_upcast_attn (fp32 attention,
# which lmlab's fp32 model computes anyway), initializer_range, use_cache, the summary_* head of
# GPT2DoubleHeadsModel, the token ids, n_ctx) are ignored, as is every key GPT-2 does not read.
FIXED_KEYS = {"activation_function": ("gelu_new", "gelu_pytorch_tanh"), "scale_attn_weights": (True,),
              "scale_attn_by_inverse_layer_idx": (False,), "add_cross_attention": (False,)}


def config_from_hf(hf: dict) -> ModelConfig:
    """Our config for an HF GPT-2 `config.json` dict; a key whose value lmlab does not compute is refused."""
    check_hf_keys(hf)
    d_model = hf["n_embd"]
    return ModelConfig(
        family="gpt2", vocab_size=hf["vocab_size"], context_length=hf["n_positions"],
        n_layers=hf["n_layer"], n_heads=hf["n_head"], d_model=d_model, d_ff=hf.get("n_inner") or 4 * d_model,
        norm_eps=hf.get("layer_norm_epsilon", 1e-5), tie_embeddings=hf.get("tie_word_embeddings", True),
    )


def check_hf_keys(hf: dict) -> None:
    """Refuse an HF GPT-2 config.json whose computation keys (`FIXED_KEYS`) lmlab cannot honour."""
    check_fixed_keys(hf, FIXED_KEYS, "gpt2")


def config_to_hf(cfg: ModelConfig) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": cfg.vocab_size,
        "n_positions": cfg.context_length, "n_ctx": cfg.context_length, "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads, "n_embd": cfg.d_model, "n_inner": cfg.d_ff, "layer_norm_epsilon": cfg.norm_eps,
        "activation_function": "gelu_new", "tie_word_embeddings": cfg.tie_embeddings,
        "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.dropout,
    }


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> our state dict."""
    ours = {k: hf_state[v] for k, v in _TOP.items()}
    for i in range(cfg.n_layers):
        for name, (hf_name, transposed) in _LAYER.items():
            t = hf_state[f"transformer.h.{i}.{hf_name}"]
            ours[f"blocks.{i}.{name}"] = t.t() if transposed else t
    ours["lm_head.weight"] = hf_state["transformer.wte.weight"] if cfg.tie_embeddings else hf_state["lm_head.weight"]
    return ours


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors (the tied LM head is left out, as HF saves it)."""
    hf = {v: state[k] for k, v in _TOP.items()}
    for i in range(cfg.n_layers):
        for name, (hf_name, transposed) in _LAYER.items():
            t = state[f"blocks.{i}.{name}"]
            hf[f"transformer.h.{i}.{hf_name}"] = t.t() if transposed else t
    if not cfg.tie_embeddings:
        hf["lm_head.weight"] = state["lm_head.weight"]
    return hf
