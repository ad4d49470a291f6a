"""Tiny HF transformers decoders (GPT-2 and Llama, tied and untied) with every weight non-zero, and the
matching lmlab presets, for parity tests; importing this module skips the tests when transformers is
missing."""

import pytest
import torch

from lmlab.models.registry import family

transformers = pytest.importorskip("transformers")

TINY = {
    "gpt2": dict(vocab_size=97, context_length=32, n_layers=2, n_heads=4, d_model=32, d_ff=64),
    "gpt2-untied": dict(vocab_size=97, context_length=32, n_layers=2, n_heads=4, d_model=32, d_ff=64,
                        tie_embeddings=False),
    "llama": dict(vocab_size=97, context_length=32, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, d_ff=48,
                  rope_base=500.0, tie_embeddings=False),
    "llama-tied-mqa": dict(vocab_size=97, context_length=32, n_layers=2, n_heads=4, n_kv_heads=1, d_model=32,
                           d_ff=48, tie_embeddings=True),
}
PRESET = {"gpt2": "gpt2-tiny", "gpt2-untied": "gpt2-tiny", "llama": "llama-tiny", "llama-tied-mqa": "llama-tiny"}


def hf_model(cfg):
    """The transformers model of lmlab config `cfg` (GPT-2 or Llama), every weight perturbed by noise."""
    hf_cfg = family(cfg.family).config_to_hf(cfg)
    cls = transformers.GPT2LMHeadModel if cfg.family == "gpt2" else transformers.LlamaForCausalLM
    config_cls = transformers.GPT2Config if cfg.family == "gpt2" else transformers.LlamaConfig
    torch.manual_seed(0)
    model = cls(config_cls(**hf_cfg)).eval()
    with torch.no_grad():  # HF zero-initialises some weights; make every weight count
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model
