"""BART <-> Hugging Face `BartForConditionalGeneration`: config fields and tensor names.

HF keeps q, k and v (and the cross-attention's k and v) as separate Linear layers; we stack them
(one matmul), so loading concatenates along the output dimension and saving splits them again.
HF's table of learned positions has `max_position_embeddings + 2` rows and position p reads row
p + 2 (a leftover of fairseq, which numbered positions after the padding index); ours has
`max_source_length` rows and position p reads row p. Loading drops HF's first two rows, which
nothing reads; saving writes them as zeros, so lmlab -> HF -> lmlab gives back every tensor
exactly and HF -> lmlab -> HF gives a model with the same outputs. The shared embedding is also
HF's `encoder.embed_tokens`, `decoder.embed_tokens` and (tied) `lm_head`: `to_hf` names it under
all four, as a strict `load_state_dict` wants; a directory writer keeps one name per tensor.

The name tables serve Marian too (models/transformer/convert.py): HF wrote Marian as a copy of BART.
"""

import torch

from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig
from lmlab.models.layer_names import layers_from_hf, layers_to_hf

MODEL_TYPE = "bart"
ARCHITECTURE = "BartForConditionalGeneration"
POSITION_OFFSET = 2  # HF BART reads position p from row p + 2 of its table

# HF `activation_function` -> ours, and back
ACTIVATIONS_FROM_HF = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                       "silu": "silu", "swish": "silu"}
ACTIVATIONS_TO_HF = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "swish"}


def _weight_and_bias(names: dict[str, str]) -> dict[str, str]:
    return {f"{ours}.{p}": f"{hf}.{p}" for ours, hf in names.items() for p in ("weight", "bias")}


# lmlab name (after encoder.blocks.{i}.) -> HF name (after model.encoder.layers.{i}.)
_ENCODER_LAYER = _weight_and_bias({
    "attention.out": "self_attn.out_proj", "norm1": "self_attn_layer_norm",
    "feed_forward.up": "fc1", "feed_forward.down": "fc2", "norm2": "final_layer_norm",
})
_DECODER_LAYER = _weight_and_bias({  # after decoder.blocks.{i}. -> after model.decoder.layers.{i}.
    "self_attention.out": "self_attn.out_proj", "norm1": "self_attn_layer_norm",
    "cross_attention.q": "encoder_attn.q_proj", "cross_attention.out": "encoder_attn.out_proj",
    "norm2": "encoder_attn_layer_norm",
    "feed_forward.up": "fc1", "feed_forward.down": "fc2", "norm3": "final_layer_norm",
})
_ENCODER_STACKED = {  # lmlab name -> HF names stacked along dim 0, in order
    f"attention.qkv.{p}": tuple(f"self_attn.{n}_proj.{p}" for n in "qkv") for p in ("weight", "bias")}
_DECODER_STACKED = {
    **{f"self_attention.qkv.{p}": tuple(f"self_attn.{n}_proj.{p}" for n in "qkv") for p in ("weight", "bias")},
    **{f"cross_attention.kv.{p}": tuple(f"encoder_attn.{n}_proj.{p}" for n in "kv") for p in ("weight", "bias")},
}
_STACKS = {"encoder": (_ENCODER_LAYER, _ENCODER_STACKED), "decoder": (_DECODER_LAYER, _DECODER_STACKED)}


def config_from_hf(hf: dict) -> EncoderDecoderConfig:
    """Our config for an HF BART `config.json` dict."""
    return EncoderDecoderConfig(family="bart", norm="layernorm", norm_placement="post", positions="learned",
                                embedding_norm=True, logits_bias=True, **shape_from_hf(hf))


def shape_from_hf(hf: dict) -> dict:
    """The config fields BART and Marian name alike: sizes, activation, special ids, tying."""
    for ours, encoder_key, decoder_key in (("n_heads", "encoder_attention_heads", "decoder_attention_heads"),
                                           ("d_ff", "encoder_ffn_dim", "decoder_ffn_dim")):
        if hf[encoder_key] != hf[decoder_key]:
            raise LmlabError(f"{encoder_key}={hf[encoder_key]} differs from {decoder_key}={hf[decoder_key]}; "
                             f"lmlab's encoder-decoders use one {ours} for both stacks")
    activation = hf.get("activation_function", "gelu")
    if activation not in ACTIVATIONS_FROM_HF:
        raise LmlabError(f"activation_function '{activation}' is not supported; lmlab reads: "
                         f"{', '.join(ACTIVATIONS_FROM_HF)}")
    return dict(
        vocab_size=hf["vocab_size"], max_source_length=hf["max_position_embeddings"],
        max_target_length=hf["max_position_embeddings"], n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"], n_heads=hf["encoder_attention_heads"], d_model=hf["d_model"],
        d_ff=hf["encoder_ffn_dim"], activation=ACTIVATIONS_FROM_HF[activation],
        scale_embeddings=hf.get("scale_embedding", False), tie_embeddings=hf.get("tie_word_embeddings", True),
        pad_id=hf["pad_token_id"], eos_id=hf["eos_token_id"], decoder_start_id=hf["decoder_start_token_id"],
        dropout=hf.get("dropout", 0.0),
    )


def config_to_hf(cfg: EncoderDecoderConfig) -> dict:
    """The HF `config.json` fields of `cfg` as a BartForConditionalGeneration."""
    check_exportable(cfg, "bart", norm_placement="post", positions="learned", embedding_norm=True)
    return {"architectures": [ARCHITECTURE], "model_type": MODEL_TYPE, **shape_to_hf(cfg)}


def shape_to_hf(cfg: EncoderDecoderConfig) -> dict:
    """The HF fields BART and Marian name alike (the inverse of `shape_from_hf`)."""
    return {
        "vocab_size": cfg.vocab_size, "max_position_embeddings": max(cfg.max_source_length, cfg.max_target_length),
        "encoder_layers": cfg.n_encoder_layers, "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": cfg.n_heads, "decoder_attention_heads": cfg.n_heads, "d_model": cfg.d_model,
        "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff,
        "activation_function": ACTIVATIONS_TO_HF[cfg.activation], "scale_embedding": cfg.scale_embeddings,
        "tie_word_embeddings": cfg.tie_embeddings, "pad_token_id": cfg.pad_id, "eos_token_id": cfg.eos_id,
        "decoder_start_token_id": cfg.decoder_start_id, "forced_eos_token_id": cfg.eos_id,
        "dropout": cfg.dropout, "attention_dropout": 0.0, "activation_dropout": 0.0, "is_encoder_decoder": True,
    }


def check_exportable(cfg: EncoderDecoderConfig, model_type: str, **fields) -> None:
    """Refuse a config whose architecture the HF model class cannot express."""
    wanted = dict(norm="layernorm", gated_ffn=False, bias=True, scaled_attention=True, head_dim=None) | fields
    for name, value in wanted.items():
        if getattr(cfg, name) != value:
            raise LmlabError(f"{name}={getattr(cfg, name)!r} cannot be saved as HF {model_type}, which needs "
                             f"{name}={value!r}")


def from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> our state dict."""
    ours = shared_from_hf(hf_state, cfg) | stacks_from_hf(hf_state, cfg)
    for stack, length in (("encoder", cfg.max_source_length), ("decoder", cfg.max_target_length)):
        table = hf_state[f"model.{stack}.embed_positions.weight"]
        ours[f"{stack}.embeddings.positions.table.weight"] = table[POSITION_OFFSET:POSITION_OFFSET + length]
        for p in ("weight", "bias"):
            ours[f"{stack}.embeddings.norm.{p}"] = hf_state[f"model.{stack}.layernorm_embedding.{p}"]
    return ours


def to_hf(state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors, every name a strict `BartForConditionalGeneration.load_state_dict` wants."""
    hf = shared_to_hf(state, cfg) | stacks_to_hf(state, cfg)
    rows = POSITION_OFFSET + max(cfg.max_source_length, cfg.max_target_length)
    for stack in ("encoder", "decoder"):
        table = state[f"{stack}.embeddings.positions.table.weight"]  # (max_length, C)
        padded = table.new_zeros(rows, cfg.d_model)
        padded[POSITION_OFFSET:POSITION_OFFSET + table.size(0)] = table
        hf[f"model.{stack}.embed_positions.weight"] = padded
        for p in ("weight", "bias"):
            hf[f"model.{stack}.layernorm_embedding.{p}"] = state[f"{stack}.embeddings.norm.{p}"]
    return hf


def shared_from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """Our token embedding (under each name that holds it), LM head and logits bias from HF's."""
    name = next((n for n in ("model.shared.weight", "model.encoder.embed_tokens.weight") if n in hf_state),
                "model.shared.weight")
    shared = hf_state[name]
    ours = {"shared.weight": shared, "encoder.embeddings.token_embedding.weight": shared,
            "decoder.embeddings.token_embedding.weight": shared,
            "lm_head.weight": shared if cfg.tie_embeddings else hf_state["lm_head.weight"]}
    if cfg.logits_bias:
        ours["logits_bias"] = hf_state["final_logits_bias"][0]  # HF's (1, V) -> (V,)
    return ours


def shared_to_hf(state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """HF's shared embedding, its tied copies, LM head and `final_logits_bias` (zeros when we have none)."""
    shared = state["shared.weight"]
    bias = state["logits_bias"] if cfg.logits_bias else shared.new_zeros(cfg.vocab_size)
    return {"model.shared.weight": shared, "model.encoder.embed_tokens.weight": shared,
            "model.decoder.embed_tokens.weight": shared, "lm_head.weight": state["lm_head.weight"],
            "final_logits_bias": bias[None]}


def stacks_from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """Every encoder and decoder layer's tensors, HF names -> ours."""
    ours = {}
    for stack, (layer, stacked) in _STACKS.items():
        n_layers = cfg.n_encoder_layers if stack == "encoder" else cfg.n_decoder_layers
        blocks = layers_from_hf(hf_state, f"model.{stack}.layers.{{i}}.", n_layers, layer, stacked)
        ours |= {f"{stack}.{name}": tensor for name, tensor in blocks.items()}
    return ours


def stacks_to_hf(state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """Every encoder and decoder layer's tensors, our names -> HF's (stacked ones split)."""
    hf = {}
    inner = cfg.n_heads * cfg.attention_head_dim
    for stack, (layer, stacked) in _STACKS.items():
        n_layers = cfg.n_encoder_layers if stack == "encoder" else cfg.n_decoder_layers
        blocks = {name.removeprefix(f"{stack}."): t for name, t in state.items() if name.startswith(f"{stack}.")}
        sizes = {name: [inner] * len(hf_names) for name, hf_names in stacked.items()}
        hf |= layers_to_hf(blocks, f"model.{stack}.layers.{{i}}.", n_layers, layer, stacked, sizes)
    return hf
