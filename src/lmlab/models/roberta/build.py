"""The RoBERTa builder: BERT's network with RoBERTa's position numbering (`RobertaEmbeddings`).

RoBERTa changed how BERT is trained (more data, larger batches, dynamic masking, no next-sentence
task, byte-level BPE), not the network: only the positions differ.
"""

from lmlab.config import EncoderConfig
from lmlab.models.bert.build import encoder_block, initialised
from lmlab.models.bert.model import BertEncoder
from lmlab.models.roberta.embeddings import RobertaEmbeddings
from lmlab.modules.pooling import ClsPooler


def build_roberta(cfg: EncoderConfig) -> BertEncoder:
    """A freshly initialised RoBERTa encoder for `cfg` (uninitialised on the meta device)."""
    embeddings = RobertaEmbeddings(cfg.vocab_size, cfg.context_length, cfg.type_vocab_size, cfg.d_model,
                                   cfg.layer_norm_eps, cfg.pad_token_id, cfg.dropout)
    blocks = [encoder_block(cfg, i) for i in range(cfg.n_layers)]
    return initialised(BertEncoder(embeddings, blocks, ClsPooler(cfg.d_model) if cfg.pooler else None), cfg)
