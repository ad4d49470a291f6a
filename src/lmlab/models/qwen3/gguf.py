"""Qwen3 <-> GGUF (llama.cpp's "qwen3"): Llama's tensors with each head's q/k RMSNorm (attn_q_norm,
attn_k_norm), in HF's row order, and the head size attention.key_length says."""

import torch

from lmlab.config import ModelConfig
from lmlab.models.llama import gguf as llama

ARCHITECTURE = "qwen3"
LAYOUT = llama.LAYOUT.replace(layer=llama.LAYOUT.layer | llama.QK_NORMS, permuted=False)
KNOWN_KEYS = llama.SHARED_KEYS


def config_from_gguf(meta: dict, shapes: dict[str, tuple[int, ...]], values=None) -> ModelConfig:
    llama.check_known_keys(meta, ARCHITECTURE, KNOWN_KEYS)
    return llama.decoder_config(meta, shapes, ARCHITECTURE, "qwen3", qk_norm="head")


def config_to_gguf(cfg: ModelConfig) -> dict:
    return llama.config_to_gguf(cfg, ARCHITECTURE)


def from_gguf(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_gguf(tensors, cfg, LAYOUT, ARCHITECTURE)
