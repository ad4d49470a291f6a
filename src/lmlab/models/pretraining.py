"""Encoders with their pre-training heads, as the pre-training recipe trains them.

`EncoderForPreTraining` is BERT / RoBERTa / ALBERT: the encoder, a masked-LM head tied to its
token embeddings and, for BERT and ALBERT, a 2-way head on the pooled [CLS] (next-sentence or
sentence-order). `ElectraForPreTraining` is a small generator and a discriminator on one shared
embedding table: the generator fills the masked positions with its own samples, the discriminator
tells, for every token, whether it was replaced.
"""

import torch
from torch import nn

from lmlab.config import EncoderConfig
from lmlab.heads.masked_lm import MaskedLMHead
from lmlab.heads.replaced_token import ReplacedTokenHead
from lmlab.heads.sentence_pair import SentencePairHead
from lmlab.models.bert.build import GELU_APPROXIMATION, initialised
from lmlab.models.encoders import build

SHARED_EMBEDDINGS = ("token", "positions", "token_type", "norm")  # the generator's, taken from the discriminator


class EncoderForPreTraining(nn.Module):
    """encoder + masked-LM head (+ sentence-pair head on the pooled [CLS])."""

    def __init__(self, encoder: nn.Module, mlm: MaskedLMHead, pair: SentencePairHead | None = None):
        super().__init__()
        self.encoder, self.mlm, self.pair = encoder, mlm, pair

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's last hidden states (B, T, d_model)."""
        return self.encoder(input_ids, attention_mask, token_type_ids)

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (…, d_model) -> token scores (…, V); pass only the masked positions to save work."""
        return self.mlm(hidden, self.encoder.embeddings.token.weight)

    def pair_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, d_model) -> (B, 2) from the pooled [CLS] state."""
        return self.pair(self.encoder.pooler(hidden))


class ElectraForPreTraining(nn.Module):
    """generator (encoder + masked-LM head) and discriminator (encoder + replaced-token head),
    the generator's token, position and type embeddings and their norm being the discriminator's."""

    def __init__(self, generator: nn.Module, generator_head: MaskedLMHead, discriminator: nn.Module,
                 rtd: ReplacedTokenHead):
        super().__init__()
        self.generator, self.generator_head = generator, generator_head
        self.discriminator, self.rtd = discriminator, rtd
        for name in SHARED_EMBEDDINGS:
            setattr(generator.embeddings, name, getattr(discriminator.embeddings, name))

    def generator_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The generator's hidden states (…, C_g) -> token scores (…, V); pass only the masked positions."""
        return self.generator_head(hidden, self.generator.embeddings.token.weight)

    def rtd_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The discriminator's "replaced" logit per token (B, T)."""
        return self.rtd(self.discriminator(input_ids, attention_mask, token_type_ids))


def mlm_head(cfg: EncoderConfig) -> MaskedLMHead:
    """The masked-LM head for an encoder of shape `cfg` (d_model -> embedding width -> vocabulary)."""
    return MaskedLMHead(cfg.d_model, cfg.embedding_width, cfg.vocab_size, cfg.layer_norm_eps,
                        GELU_APPROXIMATION[cfg.activation])


def build_for_pretraining(cfg: EncoderConfig, sentence_pair: bool) -> EncoderForPreTraining:
    """A fresh encoder of `cfg.family` with its masked-LM head and, if `sentence_pair`, the NSP/SOP
    head (which needs the pooler)."""
    encoder = build(cfg.replace(pooler=cfg.pooler or sentence_pair))
    pair = SentencePairHead(cfg.d_model) if sentence_pair else None
    return initialised(EncoderForPreTraining(encoder, mlm_head(cfg), pair), encoder.config)


def build_electra_for_pretraining(cfg: EncoderConfig) -> ElectraForPreTraining:
    """A fresh ELECTRA discriminator of shape `cfg` and its generator (`cfg.generator()`)."""
    generator = build(cfg.generator())
    # ELECTRA's generator head always uses exact GELU, its discriminator head the model's activation
    model = ElectraForPreTraining(generator, mlm_head(cfg.generator().replace(activation="gelu")), build(cfg),
                                  ReplacedTokenHead(cfg.d_model, GELU_APPROXIMATION[cfg.activation]))
    return initialised(model, cfg)
