"""OLMo 2 <-> Hugging Face `Olmo2ForCausalLM`: Llama whose norms sit on each sublayer's output, inside the
residual (x + norm(attention(x)), no norm before the sublayers), and whose queries and keys pass through an
RMSNorm over all their heads at once (weights of n_heads * head_dim and n_kv_heads * head_dim)."""

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.io.hf import check_fixed_keys
from lmlab.models.llama import convert as llama

_LAYER = {name: hf for name, hf in llama.LAYOUT.layer.items() if name not in ("norm1.weight", "norm2.weight")}
LAYOUT = llama.LAYOUT.replace(layer=_LAYER | llama.QK_NORMS | {
    "post_norm1.weight": "post_attention_layernorm.weight", "post_norm2.weight": "post_feedforward_layernorm.weight"})

# What Olmo2ForCausalLM computes beyond the shared keys (see llama.FIXED_KEYS): attention_bias puts biases on
# q, k, v and o but not on the MLP, which none of lmlab's bias settings is, and no released OLMo 2 sets it.
FIXED_KEYS = {"hidden_act": ("silu",), "attention_bias": (False,)}
NORM_EPS = 1e-5  # Olmo2Config's rms_norm_eps where config.json has none


def config_from_hf(hf: dict) -> ModelConfig:
    check_hf_keys(hf)
    return llama.decoder_config({"rms_norm_eps": NORM_EPS} | hf, "olmo2", norm_placement="output", qk_norm="all")


def check_hf_keys(hf: dict) -> None:
    check_fixed_keys(hf, FIXED_KEYS, "olmo2")
    if hf.get("clip_qkv") is not None:  # OLMo 1 clipped q, k, v; Olmo2ForCausalLM does not read the key
        raise LmlabError(f"clip_qkv={hf['clip_qkv']!r}: OLMo 2 (lmlab's and transformers') does not clip queries, "
                         "keys and values; the checkpoint is another OLMo (or its config.json is wrong)")
    llama.rope_settings(hf)


def config_to_hf(cfg: ModelConfig) -> dict:
    return llama.decoder_config_to_hf(cfg, "Olmo2ForCausalLM", "olmo2") | {"hidden_act": "silu",
                                                                          "attention_bias": False}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_hf(hf_state, cfg, LAYOUT)


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.to_hf(state, cfg, LAYOUT)
