"""ALBERT <-> Hugging Face `AlbertModel` / `AlbertForPreTraining`.

HF keeps ALBERT's one shared layer as `encoder.albert_layer_groups.0.albert_layers.0`; lmlab
supports that layout (one group of one layer, as every published ALBERT), not several groups.
Q, K and V are stacked into our fused qkv as for BERT; the E -> d_model projection is HF's
`encoder.embedding_hidden_mapping_in`, and the pooler is a bare Linear (`pooler`).
"""

import torch

from lmlab.config import EncoderConfig
from lmlab.errors import LmlabError
from lmlab.models.layer_names import layers_from_hf, layers_to_hf

BASE_PREFIX = "albert."
ENCODER_ARCHITECTURE = "AlbertModel"  # HF's class of the bare encoder (`save_hf_encoder_dir`)
PRETRAINING_ARCHITECTURE = "AlbertForPreTraining"
_HF_LAYER = "encoder.albert_layer_groups.0.albert_layers.0."
_LAYER = {  # our name (after block.) -> HF name (after _HF_LAYER)
    "attention.out.weight": "attention.dense.weight", "attention.out.bias": "attention.dense.bias",
    "norm1.weight": "attention.LayerNorm.weight", "norm1.bias": "attention.LayerNorm.bias",
    "feed_forward.up.weight": "ffn.weight", "feed_forward.up.bias": "ffn.bias",
    "feed_forward.down.weight": "ffn_output.weight", "feed_forward.down.bias": "ffn_output.bias",
    "norm2.weight": "full_layer_layer_norm.weight", "norm2.bias": "full_layer_layer_norm.bias",
}
_STACKED = {
    "attention.qkv.weight": tuple(f"attention.{n}.weight" for n in ("query", "key", "value")),
    "attention.qkv.bias": tuple(f"attention.{n}.bias" for n in ("query", "key", "value")),
}
_TOP = {
    "embeddings.token.weight": "embeddings.word_embeddings.weight",
    "embeddings.positions.table.weight": "embeddings.position_embeddings.weight",
    "embeddings.token_type.weight": "embeddings.token_type_embeddings.weight",
    "embeddings.norm.weight": "embeddings.LayerNorm.weight",
    "embeddings.norm.bias": "embeddings.LayerNorm.bias",
    "embeddings.project.weight": "encoder.embedding_hidden_mapping_in.weight",
    "embeddings.project.bias": "encoder.embedding_hidden_mapping_in.bias",
}
_POOLER = {"pooler.proj.weight": "pooler.weight", "pooler.proj.bias": "pooler.bias"}
MLM_HEAD = {"dense.weight": "predictions.dense.weight", "dense.bias": "predictions.dense.bias",
            "norm.weight": "predictions.LayerNorm.weight", "norm.bias": "predictions.LayerNorm.bias",
            "bias": "predictions.bias"}
PAIR_HEAD = {"proj.weight": "sop_classifier.classifier.weight", "proj.bias": "sop_classifier.classifier.bias"}


def config_from_hf(hf: dict) -> EncoderConfig:
    """Our config for an HF ALBERT `config.json` dict."""
    if hf.get("num_hidden_groups", 1) != 1 or hf.get("inner_group_num", 1) != 1:
        raise LmlabError(f"ALBERT with num_hidden_groups={hf.get('num_hidden_groups')} and inner_group_num="
                         f"{hf.get('inner_group_num')} is not supported; lmlab shares one layer (both 1)")
    act = hf.get("hidden_act", "gelu_new")
    if act not in ("gelu", "gelu_new"):
        raise LmlabError(f"hidden_act '{act}' is not supported; lmlab's ALBERT uses gelu or gelu_new")
    return EncoderConfig(
        family="albert", vocab_size=hf["vocab_size"], context_length=hf["max_position_embeddings"],
        n_layers=hf["num_hidden_layers"], n_heads=hf["num_attention_heads"], d_model=hf["hidden_size"],
        d_ff=hf["intermediate_size"], type_vocab_size=hf.get("type_vocab_size", 2),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12), embedding_size=hf.get("embedding_size", 128),
        activation=act, pad_token_id=hf.get("pad_token_id", 0),
    )


def config_to_hf(cfg: EncoderConfig) -> dict:
    return {
        "architectures": ["AlbertModel"], "model_type": "albert", "vocab_size": cfg.vocab_size,
        "embedding_size": cfg.embedding_width, "max_position_embeddings": cfg.context_length,
        "num_hidden_layers": cfg.n_layers, "num_hidden_groups": 1, "inner_group_num": 1,
        "num_attention_heads": cfg.n_heads, "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff,
        "type_vocab_size": cfg.type_vocab_size, "layer_norm_eps": cfg.layer_norm_eps, "hidden_act": cfg.activation,
        "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.dropout,
        "classifier_dropout_prob": cfg.dropout, "pad_token_id": cfg.pad_token_id,
    }


def has_pooler(hf_state: dict[str, torch.Tensor]) -> bool:
    return "pooler.weight" in hf_state


def from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """HF tensors (without the `albert.` prefix) -> our state dict."""
    ours = {k: hf_state[v] for k, v in _TOP.items()}
    layer = layers_from_hf(hf_state, _HF_LAYER, 1, _LAYER, _STACKED)
    ours |= {k.replace("blocks.0.", "block.", 1): v for k, v in layer.items()}
    if cfg.pooler:
        ours |= {k: hf_state[v] for k, v in _POOLER.items()}
    return ours


def to_hf(state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors (without the `albert.` prefix)."""
    hf = {v: state[k] for k, v in _TOP.items()}
    layer = {k.replace("block.", "blocks.0.", 1): v for k, v in state.items() if k.startswith("block.")}
    sizes = {name: [cfg.d_model] * 3 for name in _STACKED}
    hf |= layers_to_hf(layer, _HF_LAYER, 1, _LAYER, _STACKED, sizes)
    if cfg.pooler:
        hf |= {v: state[k] for k, v in _POOLER.items()}
    return hf
