"""Gemma 3 (text) <-> GGUF (llama.cpp's "gemma3"): Gemma 2's tensors with each head's q/k RMSNorm (stored as
1 + w, like every Gemma norm), the head tied unless output.weight is there; no attention soft-capping, the
logits' only where final_logit_softcapping says. A global layer every attention.sliding_window_pattern
layers (default 6) and the local layers' RoPE base rope.freq_base_swa (default 10000), never scaled; the
global layers' RoPE may be scaled linearly (the 4B and larger models). Queries: as Gemma 2's (the 27B has 62
layers)."""

import torch

from lmlab.config import ModelConfig
from lmlab.models.gemma2.gguf import gemma_settings, window_keys
from lmlab.models.llama import gguf as llama

ARCHITECTURE = "gemma3"
LAYOUT = llama.LAYOUT.replace(layer=llama.LAYOUT.layer | llama.POST_NORMS | llama.QK_NORMS, permuted=False)
KNOWN_KEYS = llama.SHARED_KEYS | {"attention.sliding_window", "attention.sliding_window_pattern",
                                  "rope.freq_base_swa", "final_logit_softcapping"}
PATTERN, LARGE, LOCAL_BASE = 6, 62, 10000.0  # llama.cpp's, where the file says none; the 27B's layers


def config_from_gguf(meta: dict, shapes: dict[str, tuple[int, ...]], values=None) -> ModelConfig:
    llama.check_known_keys(meta, ARCHITECTURE, KNOWN_KEYS)
    settings = gemma_settings(meta, ARCHITECTURE, PATTERN, LARGE)
    local_base = llama.key(meta, ARCHITECTURE, "rope.freq_base_swa", float, LOCAL_BASE)
    cap = llama.key(meta, ARCHITECTURE, "final_logit_softcapping", float) \
        if f"{ARCHITECTURE}.final_logit_softcapping" in meta else None
    return llama.decoder_config(meta, shapes, ARCHITECTURE, "gemma3", qk_norm="head", logit_softcap=cap,
                                rope_local_base=local_base if "sliding_window" in settings else None, **settings)


def config_to_gguf(cfg: ModelConfig) -> dict:
    """Llama's keys, the window, the local layers' RoPE base and the logits' soft-cap (the inverse of
    `config_from_gguf`)."""
    return llama.config_to_gguf(cfg, ARCHITECTURE) | window_keys(cfg, ARCHITECTURE) | (
        {f"{ARCHITECTURE}.rope.freq_base_swa": cfg.rope_local_base} if cfg.rope_local_base else {}) | (
        {f"{ARCHITECTURE}.final_logit_softcapping": cfg.logit_softcap} if cfg.logit_softcap else {})


def from_gguf(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_gguf(tensors, cfg, LAYOUT, ARCHITECTURE)
