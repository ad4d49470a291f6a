"""Mistral <-> Hugging Face `MistralForCausalLM`: Llama whose every layer may attend over a sliding window
of `sliding_window` keys (Mistral 7B v0.1: 4096; later releases: none)."""

import torch

from lmlab.config import ModelConfig
from lmlab.io.hf import check_fixed_keys
from lmlab.models.llama import convert as llama

FIXED_KEYS = {"hidden_act": ("silu",)}  # beyond the shared keys (see llama.FIXED_KEYS)


def config_from_hf(hf: dict) -> ModelConfig:
    check_hf_keys(hf)
    return llama.decoder_config(hf, "mistral", sliding_window=hf.get("sliding_window"))


def check_hf_keys(hf: dict) -> None:
    check_fixed_keys(hf, FIXED_KEYS, "mistral")
    llama.rope_settings(hf)


def config_to_hf(cfg: ModelConfig) -> dict:
    return llama.decoder_config_to_hf(cfg, "MistralForCausalLM", "mistral") | {
        "hidden_act": "silu", "sliding_window": cfg.sliding_window}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_hf(hf_state, cfg)


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.to_hf(state, cfg)
