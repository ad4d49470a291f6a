"""The original Transformer's record in the registry: saved and read as HF's `marian` model_type."""

from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.config import ENCODER_DECODER_PRESETS, EncoderDecoderConfig
from lmlab.models.family import LOAD_ENCODER_DECODER, Family
from lmlab.models.transformer import convert

FAMILY = Family("transformer", "encoder-decoder", LOAD_ENCODER_DECODER, EncoderDecoderConfig,
                "pretrain_encoder_decoder", build=build_encoder_decoder, convert=convert,
                model_type=convert.MODEL_TYPE, objective="denoising",
                presets={name: cfg for name, cfg in ENCODER_DECODER_PRESETS.items() if cfg.family == "transformer"})
