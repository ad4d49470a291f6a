"""Gemma 3 (text) <-> Hugging Face `Gemma3ForCausalLM` (model_type gemma3_text): Gemma 2 with (1 + w)
RMSNorms on each head's queries and keys, no soft-capping of the attention scores (transformers does not
read attn_logit_softcapping; the final logits' cap is off unless set), a global layer every sixth, and
the local layers' own RoPE base, never scaled (the global layers' may be: linear, factor 8, in the 4B
and larger models). The image-text model (model_type gemma3) is refused: load its text model.
"""

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.io.hf import check_fixed_keys
from lmlab.models.gemma2 import convert as gemma2
from lmlab.models.gemma2.convert import GLOBAL, LOCAL
from lmlab.models.llama import convert as llama

LAYOUT = gemma2.LAYOUT.replace(layer=gemma2.LAYOUT.layer | llama.QK_NORMS)  # q_norm, k_norm: (1 + w) too

FIXED_KEYS = gemma2.FIXED_KEYS | {"use_bidirectional_attention": (False, None)}  # beyond the keys read below
DEFAULTS = gemma2.DEFAULTS | {"final_logit_softcapping": None}  # transformers' defaults where Gemma 2's differ
GLOBAL_BASE, LOCAL_BASE = 1e6, 1e4  # transformers' RoPE bases of the global and local layers, if none is given
ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta", "rope_local_base_freq")


def config_from_hf(hf: dict) -> ModelConfig:
    check_hf_keys(hf)
    global_rope, local_rope = rope_by_layer_type(hf)
    hf = DEFAULTS | {k: v for k, v in hf.items() if k not in ROPE_KEYS} | {"rope_parameters": global_rope}
    settings = gemma2.gemma_settings(hf, every=hf.get("sliding_window_pattern", 6))
    local_base = float(local_rope["rope_theta"]) if settings["sliding_window"] is not None else None
    return llama.decoder_config(hf, "gemma3", qk_norm="head", logit_softcap=hf["final_logit_softcapping"],
                                rope_local_base=local_base, **settings)


def check_hf_keys(hf: dict) -> None:
    if hf.get("model_type") == "gemma3":
        raise LmlabError("model_type 'gemma3' is Gemma 3's image-text model (Gemma3ForConditionalGeneration), "
                         "which lmlab does not read; load a text model (model_type gemma3_text: Gemma3ForCausalLM)")
    check_fixed_keys(hf, FIXED_KEYS, "gemma3")
    rope_by_layer_type(hf)


def rope_by_layer_type(hf: dict) -> tuple[dict, dict]:
    """The RoPE parameters of the global and of the local layers, each with its rope_theta, as transformers
    reads them: transformers 5's `rope_parameters` by layer type, else the older rope_theta, rope_scaling
    (the global layers') and rope_local_base_freq. Scaled RoPE on the local layers is refused."""
    params = hf.get("rope_parameters") or {}
    if not isinstance(params, dict) or not set(params) <= {GLOBAL, LOCAL}:
        raise LmlabError(f"rope_parameters must map {GLOBAL!r} and {LOCAL!r} to their RoPE (Gemma 3's layers "
                         "have one each); fix config.json")
    global_rope = dict(params.get(GLOBAL) or {}) | dict(hf.get("rope_scaling") or {})
    global_rope.setdefault("rope_theta", hf.get("rope_theta", GLOBAL_BASE))
    local_rope = dict(params.get(LOCAL) or {})
    local_rope.setdefault("rope_theta", hf.get("rope_local_base_freq", LOCAL_BASE))
    if llama.rope_settings({}, local_rope):
        raise LmlabError(f"rope_parameters scales the RoPE of the {LOCAL} layers; lmlab scales only the "
                         f"{GLOBAL} layers' RoPE, as Gemma 3 does")
    return global_rope, local_rope


def config_to_hf(cfg: ModelConfig) -> dict:
    return gemma2.gemma_to_hf(cfg, "Gemma3ForCausalLM", "gemma3_text") | {
        "rope_local_base_freq": cfg.rope_local_base or cfg.rope_base, "use_bidirectional_attention": False}


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.from_hf(hf_state, cfg, LAYOUT)


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return llama.to_hf(state, cfg, LAYOUT)
