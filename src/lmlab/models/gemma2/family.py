"""Gemma 2's record in the registry: Llama with (1 + w) norms around each sublayer, GeGLU, a scaled
embedding, soft-capped scores and logits, and local layers alternating with global ones."""

from lmlab.config import PRESETS, ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.gemma2 import convert, gguf


def build(cfg: ModelConfig):
    """A fresh Gemma 2 network, once `cfg` is one transformers' Gemma2ForCausalLM computes (so that a run
    is refused before it trains, not when it saves)."""
    convert.check_config(cfg)
    return build_decoder(cfg)


FAMILY = Family("gemma2", "decoder", LOAD, ModelConfig, "pretrain", build=build, convert=convert, gguf=gguf,
                objective="causal_lm", presets={name: cfg for name, cfg in PRESETS.items() if cfg.family == "gemma2"})
