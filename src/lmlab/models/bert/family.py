"""BERT's record in the registry: the post-norm encoder with learned positions and token types."""

from lmlab.config import ENCODER_PRESETS, EncoderConfig
from lmlab.models.bert import convert
from lmlab.models.bert.build import build_encoder
from lmlab.models.family import LOAD_ENCODER, Family

FAMILY = Family("bert", "encoder", LOAD_ENCODER, EncoderConfig, "pretrain_encoder", build=build_encoder,
                convert=convert, objective="mlm+nsp", objectives=("mlm", "mlm+sop", "span"),
                presets={name: cfg for name, cfg in ENCODER_PRESETS.items() if cfg.family == "bert"})
