"""BERT <-> Hugging Face `BertModel`: config fields and tensor names.

HF keeps query, key and value as three Linear layers; we stack them (Q|K|V along the output
dimension, one matmul), so loading concatenates them and saving splits them again. HF's extra
buffers (`embeddings.position_ids`, `embeddings.token_type_ids`) are not weights and are dropped.
"""

import torch

from lmlab.config import EncoderConfig
from lmlab.errors import LmlabError
from lmlab.models.layer_names import layers_from_hf, layers_to_hf

_LAYER = {  # lmlab name (after blocks.{i}.) -> HF name (after encoder.layer.{i}.)
    "attention.out.weight": "attention.output.dense.weight",
    "attention.out.bias": "attention.output.dense.bias",
    "norm1.weight": "attention.output.LayerNorm.weight",
    "norm1.bias": "attention.output.LayerNorm.bias",
    "feed_forward.up.weight": "intermediate.dense.weight",
    "feed_forward.up.bias": "intermediate.dense.bias",
    "feed_forward.down.weight": "output.dense.weight",
    "feed_forward.down.bias": "output.dense.bias",
    "norm2.weight": "output.LayerNorm.weight",
    "norm2.bias": "output.LayerNorm.bias",
}
_HF_LAYER = "encoder.layer.{i}."  # the HF prefix of layer i
_STACKED = {  # lmlab name -> HF names stacked along dim 0, in order
    "attention.qkv.weight": tuple(f"attention.self.{n}.weight" for n in ("query", "key", "value")),
    "attention.qkv.bias": tuple(f"attention.self.{n}.bias" for n in ("query", "key", "value")),
}
_TOP = {
    "embeddings.token.weight": "embeddings.word_embeddings.weight",
    "embeddings.positions.table.weight": "embeddings.position_embeddings.weight",
    "embeddings.token_type.weight": "embeddings.token_type_embeddings.weight",
    "embeddings.norm.weight": "embeddings.LayerNorm.weight",
    "embeddings.norm.bias": "embeddings.LayerNorm.bias",
}
_POOLER = {"pooler.proj.weight": "pooler.dense.weight", "pooler.proj.bias": "pooler.dense.bias"}


def config_from_hf(hf: dict) -> EncoderConfig:
    """Our config for an HF BERT `config.json` dict (the pooler is decided by the weights, see `has_pooler`)."""
    if hf.get("hidden_act", "gelu") != "gelu":
        raise LmlabError(f"hidden_act '{hf['hidden_act']}' is not supported; lmlab's BERT uses exact GELU ('gelu')")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise LmlabError(f"position_embedding_type '{hf['position_embedding_type']}' is not supported; "
                         "lmlab's BERT uses absolute learned positions")
    return EncoderConfig(
        vocab_size=hf["vocab_size"], context_length=hf["max_position_embeddings"],
        n_layers=hf["num_hidden_layers"], n_heads=hf["num_attention_heads"], d_model=hf["hidden_size"],
        d_ff=hf["intermediate_size"], type_vocab_size=hf.get("type_vocab_size", 2),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
    )


def config_to_hf(cfg: EncoderConfig) -> dict:
    return {
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.context_length, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff,
        "type_vocab_size": cfg.type_vocab_size, "layer_norm_eps": cfg.layer_norm_eps, "hidden_act": "gelu",
        "position_embedding_type": "absolute", "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.dropout, "pad_token_id": 0,
    }


def has_pooler(hf_state: dict[str, torch.Tensor]) -> bool:
    """Whether an HF BERT checkpoint carries the [CLS] pooler (BertModel does, BertForMaskedLM does not)."""
    return "pooler.dense.weight" in hf_state


def from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> our state dict."""
    ours = {k: hf_state[v] for k, v in _TOP.items()}
    ours |= layers_from_hf(hf_state, _HF_LAYER, cfg.n_layers, _LAYER, _STACKED)
    if cfg.pooler:
        ours |= {k: hf_state[v] for k, v in _POOLER.items()}
    return ours


def to_hf(state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors."""
    hf = {v: state[k] for k, v in _TOP.items()}
    sizes = {name: [cfg.d_model] * len(hf_names) for name, hf_names in _STACKED.items()}  # q, k, v: d_model rows each
    hf |= layers_to_hf(state, _HF_LAYER, cfg.n_layers, _LAYER, _STACKED, sizes)
    if cfg.pooler:
        hf |= {v: state[k] for k, v in _POOLER.items()}
    return hf


# The pre-training heads (BertForPreTraining): our `mlm.*` / `pair.*` name -> HF name. The MLM
# decoder matrix is the word-embedding matrix (tied), so it is in neither table.
BASE_PREFIX = "bert."
ENCODER_ARCHITECTURE = "BertModel"  # HF's class of the bare encoder (`save_hf_encoder_dir`)
PRETRAINING_ARCHITECTURE = "BertForPreTraining"
MLM_HEAD = {
    "dense.weight": "cls.predictions.transform.dense.weight", "dense.bias": "cls.predictions.transform.dense.bias",
    "norm.weight": "cls.predictions.transform.LayerNorm.weight",
    "norm.bias": "cls.predictions.transform.LayerNorm.bias", "bias": "cls.predictions.bias",
}
PAIR_HEAD = {"proj.weight": "cls.seq_relationship.weight", "proj.bias": "cls.seq_relationship.bias"}
