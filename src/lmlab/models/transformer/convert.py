"""The original Transformer <-> Hugging Face `MarianMTModel`: config fields and tensor names.

Marian is the architecture of Vaswani et al. as HF ships it: post-norm, sinusoidal positions
added to embeddings scaled by sqrt(d_model) (`scale_embedding`), one embedding shared by source,
target and LM head, plus a `final_logits_bias`; its tensors are named like BART's (HF wrote it as
a copy), so the name tables are BART's. A loaded HF Marian becomes an lmlab "transformer" with
Marian's choices (SiLU "swish", a logits bias, sinusoidal_layout "halves"), and an lmlab
"transformer" is saved as model_type "marian", so transformers loads either.

One difference needs care: Marian's sinusoidal table puts the sines in the first half of the
columns and the cosines in the second, the paper (and our default) interleaves them. The two
tables are the same columns in another order, and reordering the channels of the residual
stream is an exact symmetry of the network (every matrix that reads or writes it, every norm
and the embeddings reordered alike give the same logits). So a model with the paper's layout is
saved with its residual channels put in Marian's order, and read back in its own order: the
directory keeps our config under "lmlab", which says which layout the model was trained with.
"""

import torch

from lmlab.errors import LmlabError
from lmlab.models.bart.convert import (
    check_exportable,
    shape_from_hf,
    shape_to_hf,
    shared_from_hf,
    shared_to_hf,
    stacks_from_hf,
    stacks_to_hf,
)
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig
from lmlab.modules.positions import sinusoidal_table

MODEL_TYPE = "marian"
ARCHITECTURE = "MarianMTModel"

# our tensors that read the residual stream (its channels are their columns) or write it (their rows)
_READS_RESIDUAL = ("shared.weight", "token_embedding.weight", "lm_head.weight", "qkv.weight", "q.weight",
                   "kv.weight", "up.weight", "gate_up.weight")
_WRITES_RESIDUAL = ("out.weight", "out.bias", "down.weight", "down.bias")


def config_from_hf(hf: dict) -> EncoderDecoderConfig:
    """Our config for an HF Marian `config.json` dict."""
    separate = not hf.get("share_encoder_decoder_embeddings", True)
    if separate or hf.get("decoder_vocab_size", hf["vocab_size"]) != hf["vocab_size"]:
        raise LmlabError("this Marian model has separate source and target vocabularies "
                         "(share_encoder_decoder_embeddings false); lmlab's Transformer shares one embedding")
    if hf.get("normalize_before", False):
        raise LmlabError("normalize_before=true (pre-norm) is not the original Transformer; lmlab reads post-norm "
                         "Marian models")
    return EncoderDecoderConfig(family="transformer", norm="layernorm", norm_placement="post",
                                positions="sinusoidal", sinusoidal_layout="halves", logits_bias=True,
                                **shape_from_hf(hf))


def config_to_hf(cfg: EncoderDecoderConfig) -> dict:
    """The HF `config.json` fields of `cfg` as a MarianMTModel."""
    check_exportable(cfg, MODEL_TYPE, norm_placement="post", positions="sinusoidal", embedding_norm=False)
    return {"architectures": [ARCHITECTURE], "model_type": MODEL_TYPE, **shape_to_hf(cfg),
            "decoder_vocab_size": cfg.vocab_size, "share_encoder_decoder_embeddings": True}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> our state dict (positions are computed, not read)."""
    ours = shared_from_hf(hf_state, cfg) | stacks_from_hf(hf_state, cfg)
    if cfg.sinusoidal_layout == "interleaved":
        ours = _reorder_residual(ours, torch.argsort(_halves_order(cfg.d_model)))
    return ours


def to_hf(state: dict[str, torch.Tensor], cfg: EncoderDecoderConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors, every name a strict `MarianMTModel.load_state_dict` wants (the
    position tables are Marian's own, which it recomputes on load)."""
    if cfg.sinusoidal_layout == "interleaved":
        state = _reorder_residual(state, _halves_order(cfg.d_model))
    hf = shared_to_hf(state, cfg) | stacks_to_hf(state, cfg)
    rows = max(cfg.max_source_length, cfg.max_target_length)
    for stack in ("encoder", "decoder"):
        hf[f"model.{stack}.embed_positions.weight"] = sinusoidal_table(rows, cfg.d_model, layout="halves")
    return hf


def _halves_order(d_model: int) -> torch.Tensor:
    """The channel order that turns an interleaved sin/cos table into Marian's: even columns, then odd."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _reorder_residual(state: dict[str, torch.Tensor], order: torch.Tensor) -> dict[str, torch.Tensor]:
    """`state` with the residual channels of every tensor put in `order` (tied tensors stay one tensor)."""
    done: dict[tuple, torch.Tensor] = {}  # (storage address, shape) -> reordered tensor
    reordered = {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key not in done:
            if name.endswith(_READS_RESIDUAL):
                done[key] = tensor[:, order]
            elif name.endswith(_WRITES_RESIDUAL) or ".norm" in name:
                done[key] = tensor[order]
            else:  # the logits bias: not residual channels
                done[key] = tensor
        reordered[name] = done[key]
    return reordered
