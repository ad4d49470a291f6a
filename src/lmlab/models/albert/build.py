"""The ALBERT builder: factorised embeddings (E -> d_model) and one shared post-norm block."""

from lmlab.config import EncoderConfig
from lmlab.models.albert.model import AlbertEncoder
from lmlab.models.bert.build import encoder_block, initialised
from lmlab.models.bert.embeddings import FactorizedEmbeddings
from lmlab.modules.pooling import ClsPooler


def build_albert(cfg: EncoderConfig) -> AlbertEncoder:
    """A freshly initialised ALBERT encoder for `cfg` (uninitialised on the meta device)."""
    embeddings = FactorizedEmbeddings(cfg.vocab_size, cfg.context_length, cfg.type_vocab_size, cfg.embedding_width,
                                      cfg.d_model, cfg.layer_norm_eps, cfg.dropout)
    pooler = ClsPooler(cfg.d_model) if cfg.pooler else None
    return initialised(AlbertEncoder(embeddings, encoder_block(cfg), cfg.n_layers, pooler), cfg)
