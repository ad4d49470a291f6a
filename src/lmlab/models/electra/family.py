"""ELECTRA's record in the registry: BERT's encoder, with embeddings narrower than the model where set."""

from lmlab.config import ENCODER_PRESETS, EncoderConfig
from lmlab.models.electra import convert
from lmlab.models.electra.build import build_electra
from lmlab.models.family import LOAD_ENCODER, Family

FAMILY = Family("electra", "encoder", LOAD_ENCODER, EncoderConfig, "pretrain_encoder", build=build_electra,
                convert=convert, objective="rtd", objectives=("rtd",), masking="dynamic",
                presets={name: cfg for name, cfg in ENCODER_PRESETS.items() if cfg.family == "electra"})
