"""Qwen2's record in the registry: Llama with q/k/v biases."""

from lmlab.config import PRESETS, ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.qwen2 import convert, gguf

FAMILY = Family("qwen2", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", presets={name: cfg for name, cfg in PRESETS.items() if cfg.family == "qwen2"})
