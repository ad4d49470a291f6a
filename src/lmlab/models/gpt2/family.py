"""GPT-2's record in the registry: a decoder with learned positions, read from HF's `gpt2` directories."""

from lmlab.config import PRESETS, ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.gpt2 import convert

FAMILY = Family("gpt2", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert,
                objective="causal_lm", presets={name: cfg for name, cfg in PRESETS.items() if cfg.family == "gpt2"})
