"""BART's record in the registry: a post-norm encoder-decoder with learned positions, pre-trained by denoising."""

from lmlab.models.bart import convert
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.config import ENCODER_DECODER_PRESETS, EncoderDecoderConfig
from lmlab.models.family import LOAD_ENCODER_DECODER, Family
from lmlab.tokenizers.encoder_decoder_bpe import EOS

FAMILY = Family("bart", "encoder-decoder", LOAD_ENCODER_DECODER, EncoderDecoderConfig, "pretrain_encoder_decoder",
                build=build_encoder_decoder, convert=convert, objective="denoising", decoder_start=EOS, source_bos=True,
                presets={name: cfg for name, cfg in ENCODER_DECODER_PRESETS.items() if cfg.family == "bart"})
