"""Qwen3 <-> Hugging Face `Qwen3ForCausalLM`: Llama with an RMSNorm on each query and key head (its own
weight of head_dim, before the rotation) and a head width of its own (head_dim 128 at every size)."""

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.io.hf import check_fixed_keys
from lmlab.models.llama import convert as llama

LAYOUT = llama.LAYOUT.replace(layer=llama.LAYOUT.layer | llama.QK_NORMS)

# What Qwen3ForCausalLM computes beyond the shared keys (see llama.FIXED_KEYS). attention_bias puts biases on
# q, k, v and o but not on the MLP, which none of lmlab's bias settings is, and no released Qwen3 sets it; the
# window is off unless use_sliding_window, which no released Qwen3 sets either: both are refused.
FIXED_KEYS = {"hidden_act": ("silu",), "attention_bias": (False,), "use_sliding_window": (False,)}
HEAD_DIM = 128  # Qwen3Config's head_dim where config.json has none


def config_from_hf(hf: dict) -> ModelConfig:
    check_hf_keys(hf)
    return llama.decoder_config({"head_dim": HEAD_DIM} | hf, "qwen3", qk_norm="head")


def check_hf_keys(hf: dict) -> None:
    check_fixed_keys(hf, FIXED_KEYS, "qwen3")
    _check_full_attention(hf)
    llama.rope_settings(hf)


def _check_full_attention(hf: dict) -> None:
    """Refuse config.json `layer_types` that name any layer other than a full-attention one."""
    kinds = hf.get("layer_types") or []
    if not isinstance(kinds, list) or any(kind != "full_attention" for kind in kinds):
        raise LmlabError(f"layer_types={str(kinds)[:80]}: lmlab's qwen3 computes full attention on every layer "
                         "only; the checkpoint is a variant lmlab does not load (or its config.json is wrong)")


def config_to_hf(cfg: ModelConfig) -> dict:
    return llama.decoder_config_to_hf(cfg, "Qwen3ForCausalLM", "qwen3") | {
        "hidden_act": "silu", "attention_bias": False, "use_sliding_window": False}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_hf(hf_state, cfg, LAYOUT)


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.to_hf(state, cfg, LAYOUT)
