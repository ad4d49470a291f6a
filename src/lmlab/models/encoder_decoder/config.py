"""`EncoderDecoderConfig`: every architectural choice of an encoder-decoder transformer, and the
named presets of the three families the course covers.

- "transformer" (Vaswani et al. 2017): post-norm LayerNorm, sinusoidal positions added to the
  embeddings scaled by sqrt(d_model), ReLU feed-forward, one embedding shared by source, target
  and LM head.
- "t5": pre-norm RMSNorm without bias, no position embeddings but a relative position bias added to
  the attention scores (unscaled: T5 folds 1/sqrt(d) into its init), ReLU (v1.0) or gated GELU
  (v1.1) feed-forward.
- "bart": post-norm LayerNorm, learned positions, a LayerNorm on the embeddings, GELU.
"""

import dataclasses
from dataclasses import dataclass
from typing import Literal

from lmlab.config import check_parameters, checked_replace
from lmlab.config_checks import (
    MAX_CONTEXT,
    MAX_EPS,
    MAX_LAYERS,
    MAX_VOCAB,
    MAX_WIDTH,
    at_least,
    at_most,
    check_types,
    fraction,
    positive,
)
from lmlab.errors import LmlabError


@dataclass(frozen=True)
class EncoderDecoderConfig:
    family: Literal["transformer", "t5", "bart"]
    vocab_size: int
    max_source_length: int  # the longest encoder input (learned/sinusoidal tables have this many rows)
    max_target_length: int  # the longest decoder input
    n_encoder_layers: int
    n_decoder_layers: int
    n_heads: int
    d_model: int
    d_ff: int
    head_dim: int | None = None  # None = d_model / n_heads (T5 allows n_heads * head_dim != d_model)
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    norm_eps: float = 1e-5
    norm_placement: Literal["pre", "post"] = "post"  # pre-norm stacks end with a final norm
    activation: Literal["relu", "gelu", "gelu_tanh", "silu"] = "relu"
    gated_ffn: bool = False  # act(W_gate x) * W_up x (T5 v1.1)
    positions: Literal["sinusoidal", "learned", "relative"] = "sinusoidal"
    sinusoidal_layout: Literal["interleaved", "halves"] = "interleaved"  # sin/cos columns: paper or Marian
    relative_buckets: int = 32
    relative_max_distance: int = 128
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model)
    embedding_norm: bool = False  # a LayerNorm after embeddings + positions (BART)
    scaled_attention: bool = True  # scores / sqrt(head_dim); False for T5
    bias: bool = True
    tie_embeddings: bool = True  # the LM head reuses the shared embedding
    logits_bias: bool = False  # a fixed bias added to the logits (BART's final_logits_bias)
    pad_id: int = 0
    eos_id: int = 1
    decoder_start_id: int = 0  # the first decoder input (T5: pad; BART: </s>)
    dropout: float = 0.0

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "vocab_size", "max_source_length", "max_target_length", "n_encoder_layers",
                 "n_decoder_layers", "n_heads", "d_model", "d_ff", "head_dim", "relative_max_distance")
        at_least(self, 0, "pad_id", "eos_id", "decoder_start_id")
        at_most(self, MAX_VOCAB, "vocab_size")
        at_most(self, MAX_CONTEXT, "max_source_length", "max_target_length", "relative_buckets",
                "relative_max_distance")
        at_most(self, MAX_LAYERS, "n_encoder_layers", "n_decoder_layers")
        at_most(self, MAX_WIDTH, "d_model", "d_ff", "head_dim")
        positive(self, "norm_eps")
        at_most(self, MAX_EPS, "norm_eps")
        fraction(self, "dropout")
        for name in ("pad_id", "eos_id", "decoder_start_id"):
            if getattr(self, name) >= self.vocab_size:
                raise LmlabError(f"{name} {getattr(self, name)} is outside the vocabulary of {self.vocab_size} tokens")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise LmlabError(f"--d-model {self.d_model} is not divisible by --n-heads {self.n_heads}; "
                             "pick a d_model that is a multiple of n_heads, or set head_dim")
        layers = self.n_encoder_layers + 2 * self.n_decoder_layers  # a decoder layer attends twice
        check_parameters(layers * (4 * self.d_model * self.n_heads * self.attention_head_dim
                                   + 3 * self.d_model * self.d_ff)
                         + (self.vocab_size + self.max_source_length + self.max_target_length) * self.d_model)
        if self.positions == "relative" and self.relative_buckets < 4:
            raise LmlabError(f"relative_buckets={self.relative_buckets} is too few; use at least 4 (T5: 32)")

    @property
    def model_type(self) -> str:
        return self.family

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def rescale_tied_logits(self) -> bool:
        """T5 with tied embeddings scales the decoder output by d_model^-0.5 before the LM head."""
        return self.family == "t5" and self.tie_embeddings

    def replace(self, **changes) -> "EncoderDecoderConfig":
        """A copy with some fields changed; unknown fields are an error."""
        return checked_replace(self, "encoder-decoder", changes)


def _transformer(**shape) -> EncoderDecoderConfig:
    return EncoderDecoderConfig(family="transformer", norm="layernorm", norm_placement="post", activation="relu",
                                positions="sinusoidal", scale_embeddings=True, **shape)


def _t5(**shape) -> EncoderDecoderConfig:
    shape.setdefault("activation", "relu")
    return EncoderDecoderConfig(family="t5", norm="rmsnorm", norm_eps=1e-6, norm_placement="pre",
                                positions="relative", scaled_attention=False, bias=False, pad_id=0, eos_id=1,
                                decoder_start_id=0, **shape)


def _bart(**shape) -> EncoderDecoderConfig:
    return EncoderDecoderConfig(family="bart", norm="layernorm", norm_placement="post", activation="gelu",
                                positions="learned", embedding_norm=True, logits_bias=True, pad_id=1, eos_id=2,
                                decoder_start_id=2, **shape)


ENCODER_DECODER_PRESETS: dict[str, EncoderDecoderConfig] = {
    "transformer-tiny": _transformer(vocab_size=4096, max_source_length=256, max_target_length=256,
                                     n_encoder_layers=2, n_decoder_layers=2, n_heads=4, d_model=128, d_ff=512),
    "transformer-base": _transformer(vocab_size=37000, max_source_length=1024, max_target_length=1024,
                                     n_encoder_layers=6, n_decoder_layers=6, n_heads=8, d_model=512, d_ff=2048),
    "t5-tiny": _t5(vocab_size=4096, max_source_length=512, max_target_length=512, n_encoder_layers=2,
                   n_decoder_layers=2, n_heads=4, d_model=128, d_ff=512),
    "t5-small": _t5(vocab_size=32128, max_source_length=512, max_target_length=512, n_encoder_layers=6,
                    n_decoder_layers=6, n_heads=8, d_model=512, d_ff=2048),
    "t5-v1_1-small": _t5(vocab_size=32128, max_source_length=512, max_target_length=512, n_encoder_layers=8,
                         n_decoder_layers=8, n_heads=6, d_model=512, d_ff=1024, head_dim=64, activation="gelu_tanh",
                         gated_ffn=True, tie_embeddings=False),
    "bart-tiny": _bart(vocab_size=4096, max_source_length=256, max_target_length=256, n_encoder_layers=2,
                       n_decoder_layers=2, n_heads=4, d_model=128, d_ff=512),
    "bart-base": _bart(vocab_size=50265, max_source_length=1024, max_target_length=1024, n_encoder_layers=6,
                       n_decoder_layers=6, n_heads=12, d_model=768, d_ff=3072),
}


def config_to_dict(cfg: EncoderDecoderConfig) -> dict:
    return dataclasses.asdict(cfg)


def config_from_dict(d: dict) -> EncoderDecoderConfig:
    names = {f.name for f in dataclasses.fields(EncoderDecoderConfig)}
    return EncoderDecoderConfig(**{k: v for k, v in d.items() if k in names})
