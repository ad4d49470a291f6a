"""Gemma 3's record in the registry: Gemma 2 with q/k norms, a global layer every sixth and the local
layers' own RoPE base; its config.json says model_type gemma3_text (the text model)."""

from lmlab.config import PRESETS, ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.gemma3 import convert, gguf


def build(cfg: ModelConfig):
    """A fresh Gemma 3 network, once `cfg` is one transformers' Gemma3ForCausalLM computes (so that a run
    is refused before it trains, not when it saves)."""
    convert.check_config(cfg)
    return build_decoder(cfg)


FAMILY = Family("gemma3", "decoder", LOAD, ModelConfig, "pretrain", build=build, convert=convert, gguf=gguf,
                objective="causal_lm", model_type="gemma3_text",
                presets={name: cfg for name, cfg in PRESETS.items() if cfg.family == "gemma3"})
