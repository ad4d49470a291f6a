"""ELECTRA's record in the registry: BERT's encoder, with embeddings narrower than the model where set."""

from lmlab.config import ENCODER_PRESETS
from lmlab.models.electra import convert
from lmlab.models.electra.build import build_electra
from lmlab.models.family import LOAD_ENCODER, Family

FAMILY = Family("electra", "encoder", LOAD_ENCODER, build=build_electra, convert=convert,
                presets={name: cfg for name, cfg in ENCODER_PRESETS.items() if cfg.family == "electra"})
