"""T5 <-> Hugging Face `T5ForConditionalGeneration`: config fields and tensor names.

HF keeps q, k and v (and the cross-attention's k and v) as separate Linear layers, and T5 v1.1's
gated feed-forward as `wi_0` (the gate) and `wi_1`; we stack them (one matmul each, gate first),
so loading concatenates along the output dimension and saving splits them again. HF gives only
block 0 of each stack a `relative_attention_bias` table and every other block reuses it; ours is
the stack's `position_bias.table`. The shared embedding is also HF's `encoder.embed_tokens`,
`decoder.embed_tokens` and, when tied, `lm_head`: `to_hf` names it under all four, as a strict
`load_state_dict` wants; a directory writer keeps one name per tensor.

Tying and the logits rescale go together, as in the published checkpoints: T5 v1.0 ties the LM
head to the embedding and multiplies the decoder output by d_model^-0.5 first; T5 v1.1 (and
mT5, Flan-T5) has its own LM head and no rescale. transformers 5 writes the rescale as
`scale_decoder_outputs` and always says `tie_word_embeddings: true`, so that field is read first.

T5's config has no maximum length: relative positions work at any length. Ours bounds the
source (checked in `encode`) and the target (the size of a new KV cache); both are read from
`n_positions` when a config has it (t5-small's does: 512) and are 512 otherwise, the length T5
was pre-trained at.

Span corruption's sentinels: T5's SentencePiece vocabulary holds 32000 pieces, then the 100
sentinels `<extra_id_0>` .. `<extra_id_99>` numbered downwards from the top, so `<extra_id_0>` is
id 32099, the highest id the tokenizer gives, and `<extra_id_k>` is 32099 - k; the embedding has
32128 rows (padded to a multiple of 128, rows 32100.. unused). Sentinel ids therefore come from
the tokenizer (`token_to_id("<extra_id_0>")`), never from counting up from 0.
"""

import torch

from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig
from lmlab.models.layer_names import layers_from_hf, layers_to_hf

MODEL_TYPE = "t5"
ARCHITECTURE = "T5ForConditionalGeneration"
DEFAULT_MAX_LENGTH = 512  # T5 was pre-trained on 512-token inputs; its config has no maximum

# HF activation names (the part of `feed_forward_proj` after "gated-") -> ours
_ACTIVATIONS_FROM_HF = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                        "silu": "silu", "swish": "silu"}
# (our activation, gated) -> HF `feed_forward_proj`; HF reads "gated-gelu" as the tanh GELU
_FEED_FORWARD_TO_HF = {("relu", False): "relu", ("gelu", False): "gelu", ("gelu_tanh", False): "gelu_new",
                       ("silu", False): "silu", ("relu", True): "gated-relu", ("gelu_tanh", True): "gated-gelu",
                       ("silu", True): "gated-silu"}
# the fields a config needs to be a T5 at all (HF's T5 has no switch for any of them)
_T5_SHAPE = dict(family="t5", norm="rmsnorm", norm_placement="pre", positions="relative", scale_embeddings=False,
                 embedding_norm=False, scaled_attention=False, bias=False, logits_bias=False)

_ENCODER_LAYER = {  # lmlab name (after encoder.blocks.{i}.) -> HF name (after encoder.block.{i}.)
    "attention.out.weight": "layer.0.SelfAttention.o.weight",
    "norm1.weight": "layer.0.layer_norm.weight",
    "feed_forward.down.weight": "layer.1.DenseReluDense.wo.weight",
    "norm2.weight": "layer.1.layer_norm.weight",
}
_DECODER_LAYER = {  # after decoder.blocks.{i}. -> after decoder.block.{i}.
    "self_attention.out.weight": "layer.0.SelfAttention.o.weight",
    "norm1.weight": "layer.0.layer_norm.weight",
    "cross_attention.q.weight": "layer.1.EncDecAttention.q.weight",
    "cross_attention.out.weight": "layer.1.EncDecAttention.o.weight",
    "norm2.weight": "layer.1.layer_norm.weight",
    "feed_forward.down.weight": "layer.2.DenseReluDense.wo.weight",
    "norm3.weight": "layer.2.layer_norm.weight",
}
_ENCODER_STACKED = {  # lmlab name -> HF names stacked along dim 0, in order
    "attention.qkv.weight": tuple(f"layer.0.SelfAttention.{n}.weight" for n in "qkv")}
_DECODER_STACKED = {
    "self_attention.qkv.weight": tuple(f"layer.0.SelfAttention.{n}.weight" for n in "qkv"),
    "cross_attention.kv.weight": tuple(f"layer.1.EncDecAttention.{n}.weight" for n in "kv"),
}
_FEED_FORWARD_LAYER = {"encoder": "layer.1.DenseReluDense.", "decoder": "layer.2.DenseReluDense."}
_POSITION_BIAS = "block.0.layer.0.SelfAttention.relative_attention_bias.weight"  # after encoder. / decoder.


def config_from_hf(hf: dict) -> EncoderDecoderConfig:
    """Our config for an HF T5 `config.json` dict (T5 v1.0, v1.1, mT5, Flan-T5)."""
    activation, gated = _feed_forward_from_hf(hf.get("feed_forward_proj", "relu"))
    d_model, n_heads, d_kv = hf["d_model"], hf["num_heads"], hf["d_kv"]
    max_length = hf.get("n_positions") or DEFAULT_MAX_LENGTH
    pad_id = hf.get("pad_token_id", 0)
    return EncoderDecoderConfig(
        **_T5_SHAPE, vocab_size=hf["vocab_size"], max_source_length=max_length, max_target_length=max_length,
        n_encoder_layers=hf["num_layers"], n_decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"],
        n_heads=n_heads, d_model=d_model, d_ff=hf["d_ff"],
        head_dim=None if d_kv * n_heads == d_model else d_kv,
        norm_eps=hf.get("layer_norm_epsilon", 1e-6), activation=activation, gated_ffn=gated,
        relative_buckets=hf.get("relative_attention_num_buckets", 32),
        relative_max_distance=hf.get("relative_attention_max_distance", 128),
        tie_embeddings=hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True)),
        pad_id=pad_id, eos_id=hf.get("eos_token_id", 1), decoder_start_id=hf.get("decoder_start_token_id", pad_id),
        dropout=hf.get("dropout_rate", 0.1),
    )


def _feed_forward_from_hf(feed_forward_proj: str) -> tuple[str, bool]:
    """HF's `feed_forward_proj` ("relu", "gated-gelu", ...) -> (our activation, gated)."""
    gated = feed_forward_proj.startswith("gated-")
    name = feed_forward_proj.removeprefix("gated-")
    if name not in _ACTIVATIONS_FROM_HF:
        raise LmlabError(f"feed_forward_proj '{feed_forward_proj}' is not supported; lmlab reads "
                         f"{', '.join(_ACTIVATIONS_FROM_HF)}, each optionally behind 'gated-'")
    if feed_forward_proj == "gated-gelu":
        return "gelu_tanh", True  # HF's T5 runs "gated-gelu" with the tanh GELU, as T5 v1.1 was trained
    return _ACTIVATIONS_FROM_HF[name], gated


def config_to_hf(cfg: EncoderDecoderConfig) -> dict:
    """The HF `config.json` fields of `cfg` as a T5ForConditionalGeneration."""
    for name, value in _T5_SHAPE.items():
        if getattr(cfg, name) != value:
            raise LmlabError(f"{name}={getattr(cfg, name)!r} cannot be saved as HF T5, which needs {name}={value!r}")
    if (cfg.activation, cfg.gated_ffn) not in _FEED_FORWARD_TO_HF:
        raise LmlabError(f"activation={cfg.activation!r} with gated_ffn={cfg.gated_ffn} cannot be saved as HF T5; "
                         "use gelu_tanh for a gated GELU (T5 v1.1)")
    return {
        "architectures": [ARCHITECTURE], "model_type": MODEL_TYPE, "vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model, "d_kv": cfg.attention_head_dim, "d_ff": cfg.d_ff,
        "num_layers": cfg.n_encoder_layers, "num_decoder_layers": cfg.n_decoder_layers, "num_heads": cfg.n_heads,
        "relative_attention_num_buckets": cfg.relative_buckets,
        "relative_attention_max_distance": cfg.relative_max_distance, "layer_norm_epsilon": cfg.norm_eps,
        "feed_forward_proj": _FEED_FORWARD_TO_HF[cfg.activation, cfg.gated_ffn],
        "tie_word_embeddings": cfg.tie_embeddings, "n_positions": max(cfg.max_source_length, cfg.max_target_length),
        "pad_token_id": cfg.pad_id, "eos_token_id": cfg.eos_id, "decoder_start_token_id": cfg.decoder_start_id,
        "dropout_rate": cfg.dropout, "is_encoder_decoder": True,
    }


def from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> our state dict (the shared embedding under each of our names that holds it)."""
    name = next((n for n in ("shared.weight", "encoder.embed_tokens.weight") if n in hf_state), "shared.weight")
    shared = hf_state[name]
    ours = {"shared.weight": shared, "encoder.embeddings.token_embedding.weight": shared,
            "decoder.embeddings.token_embedding.weight": shared, "lm_head.weight": _lm_head(hf_state, shared, cfg)}
    for stack in ("encoder", "decoder"):
        ours[f"{stack}.norm.weight"] = hf_state[f"{stack}.final_layer_norm.weight"]
        ours[f"{stack}.position_bias.table.weight"] = hf_state[f"{stack}.{_POSITION_BIAS}"]
        layer, stacked, n_layers = _stack_names(stack, cfg)
        blocks = layers_from_hf(hf_state, f"{stack}.block.{{i}}.", n_layers, layer, stacked)
        ours |= {f"{stack}.{name}": tensor for name, tensor in blocks.items()}
    return ours


def _lm_head(hf_state: dict[str, torch.Tensor], shared: torch.Tensor, cfg: EncoderDecoderConfig) -> torch.Tensor:
    """The LM head: the shared embedding when tied (or when the checkpoint stores no head of its own)."""
    head = hf_state.get("lm_head.weight")
    if head is None:
        return shared
    if cfg.tie_embeddings and head.device.type != "meta" and not torch.equal(head, shared):
        raise LmlabError("the checkpoint's lm_head differs from its shared embedding but its config ties them; "
                         "set tie_word_embeddings (or scale_decoder_outputs) to false in config.json")
    return shared if cfg.tie_embeddings else head


def to_hf(state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors, every name a strict `T5ForConditionalGeneration.load_state_dict` wants."""
    shared = state["shared.weight"]
    hf = {"shared.weight": shared, "encoder.embed_tokens.weight": shared, "decoder.embed_tokens.weight": shared,
          "lm_head.weight": state["lm_head.weight"]}
    inner = cfg.n_heads * cfg.attention_head_dim
    for stack in ("encoder", "decoder"):
        hf[f"{stack}.final_layer_norm.weight"] = state[f"{stack}.norm.weight"]
        hf[f"{stack}.{_POSITION_BIAS}"] = state[f"{stack}.position_bias.table.weight"]
        layer, stacked, n_layers = _stack_names(stack, cfg)
        sizes = {name: [cfg.d_ff] * 2 if "gate_up" in name else [inner] * len(hf_names)
                 for name, hf_names in stacked.items()}
        blocks = {name.removeprefix(f"{stack}."): t for name, t in state.items() if name.startswith(f"{stack}.")}
        hf |= layers_to_hf(blocks, f"{stack}.block.{{i}}.", n_layers, layer, stacked, sizes)
    return hf


def _stack_names(stack: str, cfg: EncoderDecoderConfig) -> tuple[dict[str, str], dict[str, tuple[str, ...]], int]:
    """(one-to-one names, stacked names, number of layers) of the encoder or decoder blocks."""
    layer, stacked = (_ENCODER_LAYER, _ENCODER_STACKED) if stack == "encoder" else (_DECODER_LAYER, _DECODER_STACKED)
    ffn = _FEED_FORWARD_LAYER[stack]
    if cfg.gated_ffn:
        stacked = stacked | {"feed_forward.gate_up.weight": (ffn + "wi_0.weight", ffn + "wi_1.weight")}
    else:
        layer = layer | {"feed_forward.up.weight": ffn + "wi.weight"}
    n_layers = cfg.n_encoder_layers if stack == "encoder" else cfg.n_decoder_layers
    return layer, stacked, n_layers
