"""The DeBERTa builder: an `EncoderConfig` (family "deberta") in, a `DebertaEncoder` out, from lmlab's modules.

A block is BERT's post-norm block with `DisentangledSelfAttention`; the relative position table (and
its LayerNorm with norm_rel_ebd "layer_norm") is the encoder's, read by every block. Initialisation is
BERT's (`initialised`).
"""

from lmlab.config import EncoderConfig
from lmlab.models.bert.build import GELU_APPROXIMATION, initialised
from lmlab.models.deberta.embeddings import DebertaEmbeddings
from lmlab.models.deberta.model import DebertaEncoder
from lmlab.modules.disentangled_attention import DisentangledSelfAttention
from lmlab.modules.feed_forward import GeluMLP
from lmlab.modules.norms import LayerNorm
from lmlab.modules.pooling import ContextPooler
from lmlab.modules.relative_position import RelativeEmbeddings
from lmlab.modules.transformer import PostNormBlock


def build_deberta(cfg: EncoderConfig) -> DebertaEncoder:
    """A freshly initialised DeBERTa encoder for `cfg` (uninitialised on the meta device)."""
    embeddings = DebertaEmbeddings(cfg.vocab_size, cfg.context_length, cfg.type_vocab_size, cfg.d_model,
                                   cfg.layer_norm_eps, cfg.position_biased_input, cfg.dropout)
    norm = LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_rel_ebd == "layer_norm" else None
    relative = RelativeEmbeddings(cfg.d_model, cfg.relative_span, cfg.relative_distance, cfg.position_buckets > 0, norm)
    blocks = [deberta_block(cfg) for _ in range(cfg.n_layers)]
    return initialised(DebertaEncoder(embeddings, blocks, relative, ContextPooler(cfg.d_model) if cfg.pooler else None),
                       cfg)


def deberta_block(cfg: EncoderConfig) -> PostNormBlock:
    """One post-norm block: disentangled attention with the position terms `cfg.pos_att_type` names, and
    an exact-GELU MLP, on packed real tokens (N, d_model)."""
    attention = DisentangledSelfAttention(cfg.d_model, cfg.n_heads, tuple(cfg.pos_att_type.split("|")),
                                          cfg.share_att_key, cfg.dropout)
    feed_forward = GeluMLP(cfg.d_model, cfg.d_ff, bias=True, approximate=GELU_APPROXIMATION[cfg.activation])
    return PostNormBlock(attention, feed_forward, LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps),
                         LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps), cfg.dropout)
