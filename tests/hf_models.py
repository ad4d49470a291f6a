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


# The Llama-like families (tests/models/test_parity_families.py): odd shapes, grouped-query heads, tied and
# untied embeddings, each family's own settings switched on, windows narrower than the test sequences.
FAMILY_TINY = {
    "mistral": dict(vocab_size=97, context_length=48, n_layers=2, n_heads=4, n_kv_heads=2, d_model=40, d_ff=56,
                    sliding_window=5, rope_base=1000.0, tie_embeddings=False),
    "mistral-no-window": dict(vocab_size=97, context_length=48, n_layers=2, n_heads=2, n_kv_heads=1, d_model=24,
                              d_ff=40, tie_embeddings=True),
    "qwen2": dict(vocab_size=97, context_length=48, n_layers=2, n_heads=6, n_kv_heads=2, d_model=48, d_ff=56,
                  qkv_bias=True, tie_embeddings=True),
    "qwen2-untied": dict(vocab_size=101, context_length=48, n_layers=3, n_heads=4, n_kv_heads=4, d_model=32, d_ff=40,
                         qkv_bias=True, tie_embeddings=False),
    "llama-llama3-rope": dict(vocab_size=97, context_length=64, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32,
                              d_ff=48, rope_scaling="llama3", rope_factor=8.0, rope_original_context=8,
                              rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, tie_embeddings=False),
    "llama-linear-rope": dict(vocab_size=97, context_length=64, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32,
                              d_ff=48, rope_scaling="linear", rope_factor=4.0, head_size=12),
    "qwen2-yarn-rope": dict(vocab_size=97, context_length=64, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32,
                            d_ff=48, qkv_bias=True, rope_scaling="yarn", rope_factor=4.0, rope_original_context=16,
                            rope_base=10000.0),
    "qwen3": dict(vocab_size=97, context_length=48, n_layers=2, n_heads=4, n_kv_heads=2, d_model=40, d_ff=56,
                  head_size=12, tie_embeddings=True),
    "qwen3-untied": dict(vocab_size=101, context_length=48, n_layers=3, n_heads=6, n_kv_heads=3, d_model=36, d_ff=40,
                         head_size=None, rope_base=10000.0, tie_embeddings=False),
    "olmo2": dict(vocab_size=97, context_length=48, n_layers=2, n_heads=6, n_kv_heads=2, d_model=48, d_ff=56,
                  tie_embeddings=False),
    "olmo2-tied-mha": dict(vocab_size=101, context_length=48, n_layers=3, n_heads=4, n_kv_heads=4, d_model=40,
                           d_ff=40, head_size=14, tie_embeddings=True),
    "phi3": dict(vocab_size=97, context_length=48, n_layers=2, n_heads=4, n_kv_heads=2, d_model=40, d_ff=56,
                 sliding_window=5, tie_embeddings=False),
    "phi3-tied-no-window": dict(vocab_size=101, context_length=48, n_layers=3, n_heads=6, n_kv_heads=1, d_model=36,
                                d_ff=40, sliding_window=None, tie_embeddings=True),
    "gemma2": dict(vocab_size=97, context_length=48, n_layers=3, n_heads=4, n_kv_heads=2, d_model=40, d_ff=56,
                   head_size=12, scale_embeddings=True, attention_scale=10**-0.5, attention_softcap=0.5,
                   logit_softcap=2.0, sliding_window=5, global_every=2, rope_base=1000.0, tie_embeddings=True),
    "gemma2-untied": dict(vocab_size=101, context_length=48, n_layers=3, n_heads=3, n_kv_heads=1, d_model=36, d_ff=44,
                          head_size=10, scale_embeddings=True, attention_scale=20**-0.5, attention_softcap=0.5,
                          logit_softcap=2.0, sliding_window=4, global_every=3, tie_embeddings=False),
    "gemma3": dict(vocab_size=97, context_length=48, n_layers=4, n_heads=6, n_kv_heads=2, d_model=36, d_ff=52,
                   head_size=8, scale_embeddings=True, attention_scale=16**-0.5, sliding_window=5, global_every=2,
                   rope_base=10000.0, rope_local_base=100.0, tie_embeddings=True),
    "gemma3-linear-rope": dict(vocab_size=101, context_length=64, n_layers=3, n_heads=4, n_kv_heads=2, d_model=44,
                               d_ff=40, head_size=14, scale_embeddings=True, attention_scale=12**-0.5,
                               logit_softcap=3.0, sliding_window=4, global_every=3, rope_base=1e6,
                               rope_local_base=1e4, rope_scaling="linear", rope_factor=8.0, tie_embeddings=False),
}
FAMILY_PRESET = {"mistral": "mistral-tiny", "mistral-no-window": "mistral-tiny", "qwen2": "qwen2-tiny",
                 "qwen2-untied": "qwen2-tiny", "llama-llama3-rope": "llama-tiny", "llama-linear-rope": "llama-tiny",
                 "qwen2-yarn-rope": "qwen2-tiny"}
FAMILY_PRESET |= {"qwen3": "qwen3-tiny", "qwen3-untied": "qwen3-tiny", "olmo2": "olmo2-tiny",
                  "olmo2-tied-mha": "olmo2-tiny", "phi3": "phi3-tiny", "phi3-tied-no-window": "phi3-tiny"}
FAMILY_PRESET |= {"gemma2": "gemma2-tiny", "gemma2-untied": "gemma2-tiny", "gemma3": "gemma3-tiny",
                  "gemma3-linear-rope": "gemma3-tiny"}


def hf_model(cfg):
    """The transformers model of lmlab config `cfg` (any decoder family: the class its config.json names),
    every weight perturbed by noise. Eager attention: the reference computes softmax(q k^T) written out."""
    hf_cfg = dict(family(cfg.family).config_to_hf(cfg))
    hf_cfg.setdefault("pad_token_id", None)  # Phi3Config's default (32000) lies outside a tiny vocabulary
    config = transformers.AutoConfig.for_model(hf_cfg.pop("model_type"), **hf_cfg)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():  # HF zero-initialises some weights; make every weight count
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model
