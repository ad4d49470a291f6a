"""Phi-3 <-> GGUF (llama.cpp's "phi3"): q, k, v as one attn_qkv and gate, up as one ffn_up (gate rows first),
the stacking lmlab computes with, in HF's row order; a sliding window of attention.sliding_window keys on
every layer (0: none). llama.cpp itself currently computes Phi-3 without its window (it warns so); lmlab
computes the window, as transformers does, so the two agree on sequences up to the window only.
The 128k models' LongRoPE (rope_factors_long / _short, rope.scaling.attn_factor) is refused."""

import torch

from lmlab.config import ModelConfig
from lmlab.models.llama import gguf as llama

ARCHITECTURE = "phi3"
FUSED = {"attention.qkv.weight": "attn_qkv.weight", "feed_forward.gate_up.weight": "ffn_up.weight"}
LAYOUT = llama.LAYOUT.replace(layer=llama.LAYOUT.layer | FUSED, stacked={}, permuted=False)
KNOWN_KEYS = llama.SHARED_KEYS | {"attention.sliding_window"}


def config_from_gguf(meta: dict, shapes: dict[str, tuple[int, ...]], values=None) -> ModelConfig:
    llama.check_known_keys(meta, ARCHITECTURE, KNOWN_KEYS)
    return llama.decoder_config(meta, shapes, ARCHITECTURE, "phi3",
                                sliding_window=llama.sliding_window(meta, ARCHITECTURE))


def config_to_gguf(cfg: ModelConfig) -> dict:
    return llama.config_to_gguf(cfg, ARCHITECTURE)


def from_gguf(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_gguf(tensors, cfg, LAYOUT, ARCHITECTURE)
