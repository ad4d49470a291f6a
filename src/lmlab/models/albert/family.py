"""ALBERT's record in the registry: an encoder whose layers share one set of weights, over factorised embeddings."""

from lmlab.config import ENCODER_PRESETS, EncoderConfig
from lmlab.models.albert import convert
from lmlab.models.albert.build import build_albert
from lmlab.models.family import LOAD_ENCODER, Family

FAMILY = Family("albert", "encoder", LOAD_ENCODER, EncoderConfig, "pretrain_encoder", build=build_albert,
                convert=convert, objective="mlm+sop", objectives=("mlm", "mlm+nsp", "span"),
                presets={name: cfg for name, cfg in ENCODER_PRESETS.items() if cfg.family == "albert"})
