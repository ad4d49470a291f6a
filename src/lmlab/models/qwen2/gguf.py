"""Qwen2 / Qwen2.5 <-> GGUF (llama.cpp's "qwen2"): Llama's tensors with q/k/v biases, in HF's row order (no
reordering: llama.cpp rotates Qwen2 with HF's pairing), and the keys every Llama-like architecture has."""

import torch

from lmlab.config import ModelConfig
from lmlab.models.llama import gguf as llama

ARCHITECTURE = "qwen2"
LAYOUT = llama.LAYOUT.replace(stacked=llama.LAYOUT.stacked | llama.QKV_BIAS, permuted=False)
KNOWN_KEYS = llama.SHARED_KEYS


def config_from_gguf(meta: dict, shapes: dict[str, tuple[int, ...]], values=None) -> ModelConfig:
    llama.check_known_keys(meta, ARCHITECTURE, KNOWN_KEYS)
    return llama.decoder_config(meta, shapes, ARCHITECTURE, "qwen2", qkv_bias=True)


def config_to_gguf(cfg: ModelConfig) -> dict:
    return llama.config_to_gguf(cfg, ARCHITECTURE)


def from_gguf(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_gguf(tensors, cfg, LAYOUT, ARCHITECTURE)
