"""RoBERTa's record in the registry: BERT's encoder with positions numbered after the pad id."""

from lmlab.config import ENCODER_PRESETS, EncoderConfig
from lmlab.models.family import LOAD_ENCODER, Family
from lmlab.models.roberta import convert
from lmlab.models.roberta.build import build_roberta

FAMILY = Family("roberta", "encoder", LOAD_ENCODER, EncoderConfig, "pretrain_encoder", build=build_roberta,
                convert=convert, objective="mlm", objectives=("span",), masking="dynamic",
                presets={name: cfg for name, cfg in ENCODER_PRESETS.items() if cfg.family == "roberta"})
