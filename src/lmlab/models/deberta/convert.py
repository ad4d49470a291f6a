"""DeBERTa <-> Hugging Face `DebertaV2Model` / `DebertaV2ForMaskedLM` / `DebertaV2ForSequenceClassification`
(model_type deberta-v2, which DeBERTa-v3 checkpoints use too).

HF keeps query, key and value as three Linear layers; we stack them into the fused qkv, as for BERT.
The position projections (`pos_key_proj`, `pos_query_proj`) exist only for the terms a model uses
and only without `share_att_key`; the relative position table and its LayerNorm are HF's
`encoder.rel_embeddings` and `encoder.LayerNorm`. The [CLS] pooler is the sequence-level heads'
`pooler.dense` (outside the `deberta.` prefix).

The masked-LM head is HF's non-legacy `lm_predictions.lm_head` (the names of Microsoft's released
checkpoints; HF's `legacy` head, `cls.predictions`, is not read). A model without input positions
(v3) keeps the absolute position table of its enhanced mask decoder where Microsoft's checkpoints
keep it, `deberta.embeddings.position_embeddings`; HF's DebertaV2ForMaskedLM has no mask decoder and
skips that table on load. Options lmlab does not build are refused in one line: a convolution beside
the first layer (conv_kernel_size), embeddings narrower than the model (embedding_size), no relative
attention, an attention_head_size of its own, and other activations.
"""

import torch

from lmlab.config import EncoderConfig
from lmlab.errors import LmlabError
from lmlab.models.layer_names import layers_from_hf, layers_to_hf

BASE_PREFIX = "deberta."
ENCODER_ARCHITECTURE = "DebertaV2Model"  # HF's class of the bare encoder (`save_hf_encoder_dir`)
PRETRAINING_ARCHITECTURE = "DebertaV2ForMaskedLM"
GENERATOR_ARCHITECTURE = "DebertaV2ForMaskedLM"
DISCRIMINATOR_ARCHITECTURE = ENCODER_ARCHITECTURE  # HF has no replaced-token class; the RTD head rides along
MLM_HEAD = {"dense.weight": "lm_predictions.lm_head.dense.weight", "dense.bias": "lm_predictions.lm_head.dense.bias",
            "norm.weight": "lm_predictions.lm_head.LayerNorm.weight",
            "norm.bias": "lm_predictions.lm_head.LayerNorm.bias", "bias": "lm_predictions.lm_head.bias"}
RTD_HEAD = {"dense.weight": "discriminator_predictions.dense.weight",  # ELECTRA's head, by ELECTRA's names
            "dense.bias": "discriminator_predictions.dense.bias",
            "proj.weight": "discriminator_predictions.dense_prediction.weight",
            "proj.bias": "discriminator_predictions.dense_prediction.bias"}
PAIR_HEAD: dict[str, str] = {}
MASK_DECODER = {"positions.table.weight": BASE_PREFIX + "embeddings.position_embeddings.weight"}

_HF_LAYER = "encoder.layer.{i}."
_LAYER = {  # our name (after blocks.{i}.) -> HF name (after _HF_LAYER): BERT's, but for the projections
    "attention.out.weight": "attention.output.dense.weight", "attention.out.bias": "attention.output.dense.bias",
    "norm1.weight": "attention.output.LayerNorm.weight", "norm1.bias": "attention.output.LayerNorm.bias",
    "feed_forward.up.weight": "intermediate.dense.weight", "feed_forward.up.bias": "intermediate.dense.bias",
    "feed_forward.down.weight": "output.dense.weight", "feed_forward.down.bias": "output.dense.bias",
    "norm2.weight": "output.LayerNorm.weight", "norm2.bias": "output.LayerNorm.bias",
}
_POS_KEY = {"attention.pos_key.weight": "attention.self.pos_key_proj.weight",
            "attention.pos_key.bias": "attention.self.pos_key_proj.bias"}
_POS_QUERY = {"attention.pos_query.weight": "attention.self.pos_query_proj.weight",
              "attention.pos_query.bias": "attention.self.pos_query_proj.bias"}
_STACKED = {
    "attention.qkv.weight": tuple(f"attention.self.{n}_proj.weight" for n in ("query", "key", "value")),
    "attention.qkv.bias": tuple(f"attention.self.{n}_proj.bias" for n in ("query", "key", "value")),
}
_EMBEDDINGS = {"embeddings.token.weight": "embeddings.word_embeddings.weight",
               "embeddings.norm.weight": "embeddings.LayerNorm.weight",
               "embeddings.norm.bias": "embeddings.LayerNorm.bias",
               "relative.table.weight": "encoder.rel_embeddings.weight"}
_INPUT_POSITIONS = {"embeddings.positions.table.weight": "embeddings.position_embeddings.weight"}
_TOKEN_TYPES = {"embeddings.token_type.weight": "embeddings.token_type_embeddings.weight"}
_RELATIVE_NORM = {"relative.norm.weight": "encoder.LayerNorm.weight", "relative.norm.bias": "encoder.LayerNorm.bias"}
_POOLER = {"pooler.proj.weight": "pooler.dense.weight", "pooler.proj.bias": "pooler.dense.bias"}


def config_from_hf(hf: dict) -> EncoderConfig:
    """Our config for an HF DeBERTa-v2/v3 `config.json` dict (the pooler is decided by the weights)."""
    hidden = hf["hidden_size"]
    refused = {"conv_kernel_size": hf.get("conv_kernel_size", 0) > 0,
               "relative_attention": not hf.get("relative_attention", False),
               "embedding_size": hf.get("embedding_size", hidden) != hidden,
               "attention_head_size": hf.get("attention_head_size", hidden // hf["num_attention_heads"])
               != hidden // hf["num_attention_heads"],
               "hidden_act": hf.get("hidden_act", "gelu") != "gelu",
               "pooler_hidden_act": hf.get("pooler_hidden_act", "gelu") != "gelu",
               "pooler_hidden_size": hf.get("pooler_hidden_size", hidden) != hidden}
    bad = [name for name, refuse in refused.items() if refuse]
    if bad:
        raise LmlabError(f"DeBERTa with {bad[0]}={hf.get(bad[0])!r} is not supported; lmlab builds relative "
                         "attention, d_model-wide embeddings and heads, exact GELU and no convolution layer")
    terms = hf.get("pos_att_type") or []
    terms = [t.strip() for t in terms.lower().split("|")] if isinstance(terms, str) else [t.lower() for t in terms]
    if not terms or not set(terms) <= {"c2p", "p2c"}:
        raise LmlabError(f"DeBERTa pos_att_type {hf.get('pos_att_type')!r} is not supported; lmlab builds c2p, p2c "
                         "or both")
    norms = [part.strip() for part in str(hf.get("norm_rel_ebd", "none")).lower().split("|")]
    return EncoderConfig(
        family="deberta", vocab_size=hf["vocab_size"], context_length=hf.get("max_position_embeddings", 512),
        n_layers=hf["num_hidden_layers"], n_heads=hf["num_attention_heads"], d_model=hidden,
        d_ff=hf["intermediate_size"], type_vocab_size=hf.get("type_vocab_size", 0),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-7), pad_token_id=hf.get("pad_token_id") or 0,
        position_biased_input=hf.get("position_biased_input", True),
        position_buckets=max(hf.get("position_buckets", -1), 0),
        max_relative_positions=hf["max_relative_positions"] if hf.get("max_relative_positions", -1) > 0 else None,
        pos_att_type="|".join(t for t in ("c2p", "p2c") if t in terms), share_att_key=hf.get("share_att_key", False),
        norm_rel_ebd="layer_norm" if "layer_norm" in norms else "none",
    )


def config_to_hf(cfg: EncoderConfig) -> dict:
    return {
        "architectures": ["DebertaV2Model"], "model_type": "deberta-v2", "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.context_length, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff,
        "type_vocab_size": cfg.type_vocab_size, "layer_norm_eps": cfg.layer_norm_eps, "hidden_act": "gelu",
        "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.dropout,
        "pad_token_id": cfg.pad_token_id,
        "relative_attention": True, "position_biased_input": cfg.position_biased_input,
        "position_buckets": cfg.position_buckets or -1, "max_relative_positions": cfg.max_relative_positions or -1,
        "pos_att_type": cfg.pos_att_type.split("|"), "share_att_key": cfg.share_att_key,
        "norm_rel_ebd": cfg.norm_rel_ebd,
        "pooler_hidden_size": cfg.d_model, "pooler_dropout": 0.0, "pooler_hidden_act": "gelu", "legacy": False,
    }


def has_pooler(hf_state: dict[str, torch.Tensor]) -> bool:
    """Whether an HF DeBERTa checkpoint carries the [CLS] pooler (the sequence-level heads' ContextPooler)."""
    return "pooler.dense.weight" in hf_state


def _tables(cfg: EncoderConfig) -> tuple[dict[str, str], dict[str, str]]:
    """(the top-level names, the per-layer names) this config's model has: ours -> HF's."""
    top = dict(_EMBEDDINGS)
    if cfg.position_biased_input:
        top |= _INPUT_POSITIONS
    if cfg.type_vocab_size > 0:
        top |= _TOKEN_TYPES
    if cfg.norm_rel_ebd == "layer_norm":
        top |= _RELATIVE_NORM
    if cfg.pooler:
        top |= _POOLER
    layer = dict(_LAYER)
    if not cfg.share_att_key:
        terms = cfg.pos_att_type.split("|")
        layer |= (_POS_KEY if "c2p" in terms else {}) | (_POS_QUERY if "p2c" in terms else {})
    return top, layer


def from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """HF tensors (without the `deberta.` prefix) -> our state dict."""
    top, layer = _tables(cfg)
    if not cfg.position_biased_input:  # the mask decoder's absolute positions, which the encoder leaves
        hf_state.get(MASK_DECODER["positions.table.weight"].removeprefix(BASE_PREFIX))
    ours = {k: hf_state[v] for k, v in top.items()}
    return ours | layers_from_hf(hf_state, _HF_LAYER, cfg.n_layers, layer, _STACKED)


def to_hf(state: dict[str, torch.Tensor], cfg: EncoderConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors (without the `deberta.` prefix)."""
    top, layer = _tables(cfg)
    sizes = {name: [cfg.d_model] * 3 for name in _STACKED}
    return {v: state[k] for k, v in top.items()} | layers_to_hf(state, _HF_LAYER, cfg.n_layers, layer, _STACKED, sizes)
