"""OLMo 2 <-> GGUF (llama.cpp's "olmo2"): norms on each sublayer's output only (post_attention_norm,
post_ffw_norm; no attn_norm or ffn_norm) and q/k RMSNorms over all heads at once, in HF's row order. OLMo 3,
written as "olmo2" with a sliding window, is refused by its window keys."""

import torch

from lmlab.config import ModelConfig
from lmlab.models.llama import gguf as llama

ARCHITECTURE = "olmo2"
_LAYER = {name: g for name, g in llama.LAYOUT.layer.items() if name not in ("norm1.weight", "norm2.weight")}
LAYOUT = llama.LAYOUT.replace(layer=_LAYER | llama.QK_NORMS | llama.POST_NORMS, permuted=False)
KNOWN_KEYS = llama.SHARED_KEYS


def config_from_gguf(meta: dict, shapes: dict[str, tuple[int, ...]], values=None) -> ModelConfig:
    llama.check_known_keys(meta, ARCHITECTURE, KNOWN_KEYS)
    return llama.decoder_config(meta, shapes, ARCHITECTURE, "olmo2", norm_placement="output", qk_norm="all")


def config_to_gguf(cfg: ModelConfig) -> dict:
    return llama.config_to_gguf(cfg, ARCHITECTURE)


def from_gguf(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_gguf(tensors, cfg, LAYOUT, ARCHITECTURE)
