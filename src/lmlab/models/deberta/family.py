"""DeBERTa's record in the registry: disentangled attention over relative positions; HF's model_type is deberta-v2."""

from lmlab.config import ENCODER_PRESETS, EncoderConfig
from lmlab.models.deberta import convert
from lmlab.models.deberta.build import build_deberta
from lmlab.models.family import LOAD_ENCODER, Family

FAMILY = Family("deberta", "encoder", LOAD_ENCODER, EncoderConfig, "pretrain_encoder", build=build_deberta,
                convert=convert, objective="mlm", objectives=("span", "rtd"), masking="dynamic",
                presets={name: cfg for name, cfg in ENCODER_PRESETS.items() if cfg.family == "deberta"},
                traits=("position_buckets", "position_biased_input"), model_type="deberta-v2")
