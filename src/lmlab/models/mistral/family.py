"""Mistral's record in the registry: Llama with a sliding window on every layer."""

from lmlab.config import PRESETS, ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.mistral import convert

FAMILY = Family("mistral", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert,
                objective="causal_lm", presets={name: cfg for name, cfg in PRESETS.items() if cfg.family == "mistral"})
