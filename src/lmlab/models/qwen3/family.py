"""Qwen3's record in the registry: Llama with per-head q/k RMSNorms."""

from lmlab.config import PRESETS, ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.qwen3 import convert, gguf

FAMILY = Family("qwen3", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", presets={name: cfg for name, cfg in PRESETS.items() if cfg.family == "qwen3"})
