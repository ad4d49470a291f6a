"""Gemma 2 <-> GGUF (llama.cpp's "gemma2"): Llama's tensors with a norm after each sublayer too
(post_attention_norm, post_ffw_norm), in HF's row order, the head tied to the embedding (llama.cpp's converter
drops any lm_head). llama.cpp's converter stores every norm weight as 1 + w, which is our RMSNorm's weight.

What llama.cpp computes for the file, and lmlab with it: embeddings times sqrt(d_model), GeGLU, local layers
(attention.sliding_window) with a global one every attention.sliding_window_pattern layers (default 2),
soft-capped scores and logits (defaults 50 and 30), and queries scaled by 1 / sqrt(head size), except in the
27B model (46 layers), whose queries are scaled by 1 / sqrt(d_model / n_heads): llama.cpp decides that by the
layer count, as Gemma's own code does, since the file does not hold query_pre_attn_scalar.
"""

import torch

from lmlab.config import ModelConfig
from lmlab.models.llama import gguf as llama

ARCHITECTURE = "gemma2"
LAYOUT = llama.LAYOUT.replace(layer=llama.LAYOUT.layer | llama.POST_NORMS, permuted=False)
KNOWN_KEYS = llama.SHARED_KEYS | {"attention.sliding_window", "attention.sliding_window_pattern",
                                  "attn_logit_softcapping", "final_logit_softcapping"}
PATTERN, WINDOW, LARGE = 2, 4096, 46  # llama.cpp's where the file says none; the 27B's layers
SOFTCAPS = {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}  # llama.cpp's where the file has none


def config_from_gguf(meta: dict, shapes: dict[str, tuple[int, ...]], values=None) -> ModelConfig:
    llama.check_known_keys(meta, ARCHITECTURE, KNOWN_KEYS)
    caps = {name: llama.key(meta, ARCHITECTURE, name, float, default) for name, default in SOFTCAPS.items()}
    return llama.decoder_config(meta, shapes, ARCHITECTURE, "gemma2",
                                **gemma_settings(meta, ARCHITECTURE, PATTERN, LARGE, WINDOW),
                                attention_softcap=caps["attn_logit_softcapping"],
                                logit_softcap=caps["final_logit_softcapping"])


def gemma_settings(meta: dict, arch: str, pattern: int, large: int, window: int | None = None) -> dict:
    """Our settings of what Gemma 2 and 3 share, as llama.cpp computes them for the file: `pattern` and `window`,
    its global layer every so many and its window where the file says none; `large`, the layer count of the
    model whose queries it scales by 1 / sqrt(d_model / n_heads)."""
    n_layers, d_model = llama.key(meta, arch, "block_count", int), llama.key(meta, arch, "embedding_length", int)
    n_heads = llama.key(meta, arch, "attention.head_count", int)
    scalar = d_model // n_heads if n_layers == large else llama.head_size(meta, arch)  # query_pre_attn_scalar
    return dict(norm_placement="sandwich", ffn="geglu", scale_embeddings=True, attention_scale=scalar ** -0.5,
                **llama.window_settings(meta, arch, n_layers, pattern, window))


def config_to_gguf(cfg: ModelConfig) -> dict:
    """Llama's keys, the soft-caps and the window (the inverse of `config_from_gguf`)."""
    caps = {"attn_logit_softcapping": cfg.attention_softcap, "final_logit_softcapping": cfg.logit_softcap}
    return llama.config_to_gguf(cfg, ARCHITECTURE) | window_keys(cfg, ARCHITECTURE) | {
        f"{ARCHITECTURE}.{name}": cap for name, cap in caps.items() if cap is not None}


def window_keys(cfg: ModelConfig, arch: str) -> dict:
    """attention.sliding_window and its pattern (a global layer every k; n_layers + 1: none) for Gemma's windows."""
    if not cfg.sliding_window:
        return {f"{arch}.attention.sliding_window": 0}
    return {f"{arch}.attention.sliding_window": cfg.sliding_window,
            f"{arch}.attention.sliding_window_pattern": cfg.global_every or cfg.n_layers + 1}


def from_gguf(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_gguf(tensors, cfg, LAYOUT, ARCHITECTURE)
