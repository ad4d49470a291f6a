"""Qwen2 / Qwen2.5 <-> Hugging Face `Qwen2ForCausalLM`: Llama with biases on the query, key and value projections."""

import torch

from lmlab.config import ModelConfig
from lmlab.io.hf import check_fixed_keys
from lmlab.models.llama import convert as llama

LAYOUT = llama.LAYOUT.replace(stacked=llama.LAYOUT.stacked | llama.QKV_BIAS)

# What Qwen2ForCausalLM computes beyond the shared keys (see llama.FIXED_KEYS): its window is off unless
# use_sliding_window, which no released Qwen2 checkpoint sets; lmlab refuses it rather than guess its layers.
FIXED_KEYS = {"hidden_act": ("silu",), "use_sliding_window": (False,)}


def config_from_hf(hf: dict) -> ModelConfig:
    check_hf_keys(hf)
    return llama.decoder_config(hf, "qwen2", qkv_bias=True)


def check_hf_keys(hf: dict) -> None:
    check_fixed_keys(hf, FIXED_KEYS, "qwen2")
    llama.rope_settings(hf)


def config_to_hf(cfg: ModelConfig) -> dict:
    return llama.decoder_config_to_hf(cfg, "Qwen2ForCausalLM", "qwen2") | {"hidden_act": "silu",
                                                                          "use_sliding_window": False}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_hf(hf_state, cfg, LAYOUT)


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.to_hf(state, cfg, LAYOUT)
