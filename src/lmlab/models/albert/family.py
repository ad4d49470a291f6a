"""ALBERT's record in the registry: an encoder whose layers share one set of weights, over factorised embeddings."""

from lmlab.config import ENCODER_PRESETS
from lmlab.models.albert import convert
from lmlab.models.albert.build import build_albert
from lmlab.models.family import LOAD_ENCODER, Family

FAMILY = Family("albert", "encoder", LOAD_ENCODER, build=build_albert, convert=convert,
                presets={name: cfg for name, cfg in ENCODER_PRESETS.items() if cfg.family == "albert"})
