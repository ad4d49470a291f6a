"""Phi-3 <-> Hugging Face `Phi3ForCausalLM`: Llama whose files hold q, k, v as one `qkv_proj` (q rows, then
k, then v) and gate, up as one `gate_up_proj` (gate rows first), the stacking lmlab computes with, so they
map as they are; and a sliding window of `sliding_window` keys on every layer (Phi-3-mini-4k: 2047)."""

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.io.hf import check_fixed_keys, hf_keys, same_value
from lmlab.models.llama import convert as llama

LAYOUT = llama.LAYOUT.replace(
    layer=llama.LAYOUT.layer | {"attention.qkv.weight": "self_attn.qkv_proj.weight",
                                "feed_forward.gate_up.weight": "mlp.gate_up_proj.weight"},
    stacked={})

FIXED_KEYS = {"hidden_act": ("silu",)}  # beyond the shared keys (see llama.FIXED_KEYS)
NORM_EPS = 1e-5  # Phi3Config's rms_norm_eps where config.json has none


def config_from_hf(hf: dict) -> ModelConfig:
    check_hf_keys(hf)
    return llama.decoder_config({"rms_norm_eps": NORM_EPS} | _whole_rotation(hf), "phi3",
                                sliding_window=hf.get("sliding_window"))


def check_hf_keys(hf: dict) -> None:
    check_fixed_keys(hf, FIXED_KEYS, "phi3")
    hf = _whole_rotation(hf)
    scaling = hf_keys(hf).get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else scaling
    if kind != "default":  # Phi3Config reads "su" and "yarn" as LongRoPE too
        raise LmlabError(f"RoPE scaling {kind!r} is not supported for phi3 (transformers computes each scaled Phi-3 "
                         "RoPE as LongRoPE, the 128k models'); lmlab's phi3 is unscaled only (the 4k models)")
    llama.rope_settings(hf)


def _whole_rotation(hf: dict) -> dict:
    """config.json `hf` without its partial_rotary_factor (top level or in rope_parameters, where transformers 5
    writes it), refused unless 1: RoPE rotating only part of each head (Phi-4-mini's 0.75) is not computed."""
    params = hf.get("rope_parameters")
    factors = [hf.get("partial_rotary_factor", 1.0)]
    if isinstance(params, dict):
        factors.append(params.get("partial_rotary_factor", 1.0))
    for factor in factors:
        if not same_value(factor, 1.0):
            raise LmlabError(f"partial_rotary_factor={factor!r}: lmlab's phi3 rotates the whole head only "
                             "(Phi-4-mini rotates 0.75 of it), so this checkpoint does not load")
    hf = {k: v for k, v in hf.items() if k != "partial_rotary_factor"}
    if isinstance(params, dict):
        hf["rope_parameters"] = {k: v for k, v in params.items() if k != "partial_rotary_factor"}
    return hf


def config_to_hf(cfg: ModelConfig) -> dict:
    return llama.decoder_config_to_hf(cfg, "Phi3ForCausalLM", "phi3") | {
        "hidden_act": "silu", "sliding_window": cfg.sliding_window}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_hf(hf_state, cfg, LAYOUT)


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.to_hf(state, cfg, LAYOUT)
