"""Encoders with their pre-training heads, as the pre-training recipe trains them.

`EncoderForPreTraining` is BERT / RoBERTa / ALBERT / DeBERTa: the encoder, a masked-LM head tied to
its token embeddings and, for BERT and ALBERT, a 2-way head on the pooled [CLS] (next-sentence or
sentence-order); a DeBERTa without input positions reads its MLM states through the enhanced mask
decoder. `ElectraForPreTraining` is a small generator and a discriminator on shared embeddings: the
generator fills the masked positions with its own samples, the discriminator tells, for every
token, whether it was replaced. ELECTRA shares the tables outright (`share_embeddings`); DeBERTa-v3
shares the token table gradient-disentangled (`GradientDisentangledEmbedding`).
"""

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.config import EncoderConfig
from lmlab.heads.masked_lm import MaskedLMHead
from lmlab.heads.replaced_token import ReplacedTokenHead
from lmlab.heads.sentence_pair import SentencePairHead
from lmlab.models.bert.build import GELU_APPROXIMATION, initialised
from lmlab.models.deberta.mask_decoder import EnhancedMaskDecoder
from lmlab.models.encoders import build

SHARED_EMBEDDINGS = ("token", "positions", "token_type", "norm")  # the generator's, taken from the discriminator


class EncoderForPreTraining(nn.Module):
    """encoder + masked-LM head (+ sentence-pair head on the pooled [CLS]) (+ DeBERTa's enhanced mask decoder)."""

    def __init__(self, encoder: nn.Module, mlm: MaskedLMHead, pair: SentencePairHead | None = None,
                 mask_decoder: EnhancedMaskDecoder | None = None):
        super().__init__()
        self.encoder, self.mlm, self.pair, self.mask_decoder = encoder, mlm, pair, mask_decoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The hidden states the heads read (B, T, d_model): the encoder's last, or the mask decoder's."""
        if self.mask_decoder is not None:
            return self.mask_decoder(self.encoder, input_ids, attention_mask, token_type_ids)
        return self.encoder(input_ids, attention_mask, token_type_ids)

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (…, d_model) -> token scores (…, V); pass only the masked positions to save work."""
        return self.mlm(hidden, self.encoder.embeddings.token.weight)

    def pair_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, d_model) -> (B, 2) from the pooled [CLS] state."""
        return self.pair(self.encoder.pooler(hidden))


class ElectraForPreTraining(nn.Module):
    """generator (encoder + masked-LM head, + DeBERTa's enhanced mask decoder) and discriminator (encoder +
    replaced-token head), on embeddings the builder shares (`share_embeddings`, `share_gradient_disentangled`)."""

    def __init__(self, generator: nn.Module, generator_head: MaskedLMHead, discriminator: nn.Module,
                 rtd: ReplacedTokenHead, mask_decoder: EnhancedMaskDecoder | None = None):
        super().__init__()
        self.generator, self.generator_head = generator, generator_head
        self.discriminator, self.rtd = discriminator, rtd
        self.mask_decoder = mask_decoder

    def generator_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                         token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The generator's hidden states that its MLM head reads (B, T, C_g)."""
        if self.mask_decoder is not None:
            return self.mask_decoder(self.generator, input_ids, attention_mask, token_type_ids)
        return self.generator(input_ids, attention_mask, token_type_ids)

    def generator_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The generator's hidden states (…, C_g) -> token scores (…, V); pass only the masked positions."""
        return self.generator_head(hidden, self.generator.embeddings.token.weight)

    def rtd_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The discriminator's "replaced" logit per token (B, T)."""
        return self.rtd(self.discriminator(input_ids, attention_mask, token_type_ids))


def share_embeddings(generator: nn.Module, discriminator: nn.Module) -> None:
    """ELECTRA's sharing: the generator's token, position and type embeddings and their norm become the
    discriminator's own modules, so both losses train one table."""
    for name in SHARED_EMBEDDINGS:
        setattr(generator.embeddings, name, getattr(discriminator.embeddings, name))


class GradientDisentangledEmbedding(nn.Module):
    """DeBERTa-v3's gradient-disentangled embedding sharing (GDES): E_D = sg(E_G) + E_delta.

    Sharing one table outright lets the discriminator's loss pull the token vectors one way while the
    generator's MLM pulls them another (a tug-of-war that slows both). Here the discriminator reads
    the generator's table with the gradient stopped, so only MLM trains E_G, and learns its own
    correction E_delta (`bias`, Microsoft's "word_bias"), zero at the start. `weight` is the table the
    discriminator uses."""

    def __init__(self, shared: nn.Embedding):
        super().__init__()
        self.shared = shared
        self.bias = nn.Parameter(torch.zeros_like(shared.weight))  # E_delta (V, C)

    @property
    def weight(self) -> torch.Tensor:
        return self.shared.weight.detach() + self.bias  # (V, C)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight)


def share_gradient_disentangled(generator: nn.Module, discriminator: nn.Module) -> None:
    """DeBERTa-v3's sharing: the discriminator's token table becomes sg(generator's) + its own delta."""
    discriminator.embeddings.token = GradientDisentangledEmbedding(generator.embeddings.token)


def mask_decoder(cfg: EncoderConfig) -> EnhancedMaskDecoder | None:
    """DeBERTa's enhanced mask decoder for a model without input positions; None for any other model."""
    if cfg.family == "deberta" and not cfg.position_biased_input:
        return EnhancedMaskDecoder(cfg.context_length, cfg.d_model)
    return None


def mlm_head(cfg: EncoderConfig) -> MaskedLMHead:
    """The masked-LM head for an encoder of shape `cfg` (d_model -> embedding width -> vocabulary)."""
    return MaskedLMHead(cfg.d_model, cfg.embedding_width, cfg.vocab_size, cfg.layer_norm_eps,
                        GELU_APPROXIMATION[cfg.activation])


def build_for_pretraining(cfg: EncoderConfig, sentence_pair: bool) -> EncoderForPreTraining:
    """A fresh encoder of `cfg.family` with its masked-LM head and, if `sentence_pair`, the NSP/SOP
    head (which needs the pooler)."""
    encoder = build(cfg.replace(pooler=cfg.pooler or sentence_pair))
    pair = SentencePairHead(cfg.d_model) if sentence_pair else None
    return initialised(EncoderForPreTraining(encoder, mlm_head(cfg), pair, mask_decoder(cfg)), encoder.config)


def build_electra_for_pretraining(cfg: EncoderConfig) -> ElectraForPreTraining:
    """A fresh discriminator of shape `cfg` and its generator (`cfg.generator()`) for replaced-token
    detection: ELECTRA's, sharing the embeddings outright, or DeBERTa-v3's, sharing the token table
    gradient-disentangled, its generator reading through the enhanced mask decoder."""
    generator_cfg = cfg.generator()
    generator = build(generator_cfg)
    # ELECTRA's generator head always uses exact GELU, its discriminator head the model's activation
    model = ElectraForPreTraining(generator, mlm_head(generator_cfg.replace(activation="gelu")), build(cfg),
                                  ReplacedTokenHead(cfg.d_model, GELU_APPROXIMATION[cfg.activation]),
                                  mask_decoder(generator_cfg))
    share = share_gradient_disentangled if cfg.family == "deberta" else share_embeddings
    share(model.generator, model.discriminator)
    return initialised(model, cfg)  # a GDES table's own `bias` starts at zero, as every bias
