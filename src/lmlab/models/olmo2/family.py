"""OLMo 2's record in the registry: Llama with norms on the sublayers' outputs and q/k RMSNorms over all heads."""

from lmlab.config import PRESETS, ModelConfig
from lmlab.models.decoder import build_decoder
from lmlab.models.family import LOAD, Family
from lmlab.models.olmo2 import convert, gguf

FAMILY = Family("olmo2", "decoder", LOAD, ModelConfig, "pretrain", build=build_decoder, convert=convert, gguf=gguf,
                objective="causal_lm", presets={name: cfg for name, cfg in PRESETS.items() if cfg.family == "olmo2"})
