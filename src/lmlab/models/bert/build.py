"""The BERT builder: an `EncoderConfig` in, a `BertEncoder` out, from lmlab's shared modules.

Initialisation follows BERT: N(0, 0.02) for every matrix and embedding, zero biases, unit norms.
The other encoder families (RoBERTa, ALBERT, ELECTRA) build their blocks with `encoder_block`
and initialise with `initialised`, so one block and one initialisation serve them all.
"""

import torch
from torch import nn

from lmlab.config import EncoderConfig
from lmlab.models.bert.embeddings import BertEmbeddings
from lmlab.models.bert.model import BertEncoder
from lmlab.modules.efficient_attention import attention_core
from lmlab.modules.feed_forward import GeluMLP
from lmlab.modules.norms import LayerNorm
from lmlab.modules.pooling import ClsPooler
from lmlab.modules.transformer import PostNormBlock
from lmlab.modules.unpadding import UnpaddedSelfAttention

GELU_APPROXIMATION = {"gelu": "none", "gelu_new": "tanh"}  # HF's activation name -> torch's `approximate`


def build_encoder(cfg: EncoderConfig) -> BertEncoder:
    """A freshly initialised BERT encoder for `cfg` (uninitialised on the meta device, to receive loaded weights)."""
    embeddings = BertEmbeddings(cfg.vocab_size, cfg.context_length, cfg.type_vocab_size, cfg.d_model,
                                cfg.layer_norm_eps, cfg.dropout)
    blocks = [encoder_block(cfg, i) for i in range(cfg.n_layers)]
    return initialised(BertEncoder(embeddings, blocks, ClsPooler(cfg.d_model) if cfg.pooler else None), cfg)


def encoder_block(cfg: EncoderConfig, layer: int = 0) -> PostNormBlock:
    """One post-norm block: bidirectional attention (full, or the efficient method `cfg.attention` names, its
    random parts seeded by `layer`) and a GELU MLP (exact GELU for BERT, tanh for "gelu_new"), run on packed
    real tokens (N, d_model) with an `Unpadding` in place of the mask."""
    return PostNormBlock(UnpaddedSelfAttention(cfg.d_model, cfg.n_heads, bias=True, dropout=cfg.dropout,
                                               core=attention_core(cfg, causal=False, layer=layer)),
                         GeluMLP(cfg.d_model, cfg.d_ff, bias=True, approximate=GELU_APPROXIMATION[cfg.activation]),
                         LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps), LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps),
                         cfg.dropout)


def initialised(model: nn.Module, cfg: EncoderConfig) -> nn.Module:
    """`model` with its config attached and BERT's initialisation applied (skipped on the meta device)."""
    model.config = cfg
    if next(model.parameters()).device.type != "meta":
        _init_weights(model)
    return model


@torch.no_grad()
def _init_weights(model: nn.Module) -> None:
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.zero_()
        elif "norm" in name:
            p.fill_(1.0)
        else:
            p.normal_(0.0, 0.02)
