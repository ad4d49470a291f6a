"""Llama's record in the registry: a decoder with RoPE, RMSNorm, SwiGLU and grouped-query attention."""

from lmlab.config import PRESETS, ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.llama import convert, gguf

FAMILY = Family("llama", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", presets={name: cfg for name, cfg in PRESETS.items() if cfg.family == "llama"})
