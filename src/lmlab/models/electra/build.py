"""The ELECTRA builder: BERT's network on embeddings of width E, projected to d_model when E differs.

The same builder makes the discriminator (`cfg`) and the generator (`cfg.generator()`): the
generator is narrower but keeps the embedding width, so the two can share one embedding table.
"""

from lmlab.config import EncoderConfig
from lmlab.models.bert.build import encoder_block, initialised
from lmlab.models.bert.embeddings import BertEmbeddings, FactorizedEmbeddings
from lmlab.models.bert.model import BertEncoder
from lmlab.modules.pooling import ClsPooler


def build_electra(cfg: EncoderConfig) -> BertEncoder:
    """A freshly initialised ELECTRA encoder for `cfg` (uninitialised on the meta device)."""
    if cfg.embedding_width == cfg.d_model:
        embeddings = BertEmbeddings(cfg.vocab_size, cfg.context_length, cfg.type_vocab_size, cfg.d_model,
                                    cfg.layer_norm_eps, cfg.dropout)
    else:
        embeddings = FactorizedEmbeddings(cfg.vocab_size, cfg.context_length, cfg.type_vocab_size,
                                          cfg.embedding_width, cfg.d_model, cfg.layer_norm_eps, cfg.dropout)
    blocks = [encoder_block(cfg, i) for i in range(cfg.n_layers)]
    return initialised(BertEncoder(embeddings, blocks, ClsPooler(cfg.d_model) if cfg.pooler else None), cfg)
