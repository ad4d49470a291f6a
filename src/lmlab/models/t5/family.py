"""T5's record in the registry: a pre-norm encoder-decoder with relative position buckets."""

from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.config import ENCODER_DECODER_PRESETS, EncoderDecoderConfig
from lmlab.models.family import LOAD_ENCODER_DECODER, Family
from lmlab.models.t5 import convert

FAMILY = Family("t5", "encoder-decoder", LOAD_ENCODER_DECODER, EncoderDecoderConfig, "pretrain_encoder_decoder",
                build=build_encoder_decoder, convert=convert, objective="span_corruption",
                presets={name: cfg for name, cfg in ENCODER_DECODER_PRESETS.items() if cfg.family == "t5"})
