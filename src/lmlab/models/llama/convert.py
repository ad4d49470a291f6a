"""Llama <-> Hugging Face `LlamaForCausalLM`: config fields and tensor names; and the pieces that the
converters of the Llama-like families (Mistral, Qwen, Gemma, Phi-3, OLMo 2) are diffs of.

HF keeps q/k/v and gate/up as separate matrices; we stack them (one matmul each), so loading
concatenates along the output dimension and saving splits them again. Where a family's tensors
are is data, a `Layout`; what its config.json means is `decoder_config` plus the family's own settings.
"""

import dataclasses
from dataclasses import dataclass

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.io.hf import check_fixed_keys, hf_keys, same_value
from lmlab.models.layer_names import layers_from_hf, layers_to_hf


@dataclass(frozen=True)
class Layout:
    """Where our tensors sit in a family's HF checkpoint: per layer (after `blocks.{i}.` and `prefix`) one
    tensor each (`layer`) or several stacked along dim 0 (`stacked`), the rest by full name (`top`).
    `norm_offset` is added to every norm weight on load and taken off on save: Gemma stores w and computes
    x (1 + w), which is our RMSNorm with weight 1 + w."""

    layer: dict[str, str]  # our name -> HF name, both within layer i
    stacked: dict[str, tuple[str, ...]]  # our name -> HF names stacked along dim 0, in order
    top: dict[str, str]  # our name -> HF name, outside the layers
    prefix: str = "model.layers.{i}."  # the HF prefix of layer i
    norm_offset: float = 0.0

    def replace(self, **changes) -> "Layout":
        return dataclasses.replace(self, **changes)


LAYOUT = Layout(
    layer={"norm1.weight": "input_layernorm.weight", "attention.out.weight": "self_attn.o_proj.weight",
           "norm2.weight": "post_attention_layernorm.weight", "feed_forward.down.weight": "mlp.down_proj.weight"},
    stacked={"attention.qkv.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
             "feed_forward.gate_up.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight")},
    top={"token_embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"},
)
QKV_BIAS = {"attention.qkv.bias": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias")}
QK_NORMS = {"attention.q_norm.weight": "self_attn.q_norm.weight", "attention.k_norm.weight": "self_attn.k_norm.weight"}


# The keys of an HF Llama config.json that change what LlamaForCausalLM computes, beyond the sizes
# decoder_config maps (vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, head_dim, max_position_embeddings, rms_norm_eps, rope_theta / rope_parameters /
# rope_scaling, tie_word_embeddings): each must hold a value lmlab's Llama computes, the first being
# transformers' default. Keys that change nothing at inference (attention_dropout, pretraining_tp (the same
# matmuls, split), initializer_range, use_cache, the token ids, dtype) are ignored, as is every key
# LlamaForCausalLM does not read (sliding_window among them).
FIXED_KEYS = {"hidden_act": ("silu",), "attention_bias": (False,), "mlp_bias": (False,)}

# rope_type -> our rope_scaling, and the keys of its parameters -> our fields (`rope_settings`)
_ROPE_TYPES = {"default": "none", "linear": "linear", "llama3": "llama3", "yarn": "yarn"}
_ROPE_KEYS = {"factor": "rope_factor", "original_max_position_embeddings": "rope_original_context",
              "low_freq_factor": "rope_low_freq_factor", "high_freq_factor": "rope_high_freq_factor",
              "beta_fast": "rope_beta_fast", "beta_slow": "rope_beta_slow", "attention_factor": "rope_attention_factor"}
_ROPE_IGNORED = {"rope_type", "type", "rope_theta", "truncate"}  # read elsewhere, or checked (truncate)
_ROPE_WRITTEN = {  # our rope_scaling -> the parameters config.json gets for it
    "linear": ("factor",),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor"),
}


def config_from_hf(hf: dict) -> ModelConfig:
    """Our config for an HF Llama `config.json` dict; a key whose value lmlab does not compute is refused."""
    check_hf_keys(hf)
    return decoder_config(hf, "llama")


def check_hf_keys(hf: dict) -> None:
    """Refuse an HF Llama config.json whose computation keys (`FIXED_KEYS`, the RoPE settings) lmlab cannot honour."""
    check_fixed_keys(hf, FIXED_KEYS, "llama")
    rope_settings(hf)


def decoder_config(hf: dict, family: str, tie_default: bool = False, **settings) -> ModelConfig:
    """The config of a Llama-like HF config.json: the keys the families share (sizes, norm epsilon, RoPE and its
    scaling, tied embeddings, `tie_default` where the file says nothing), then the family's own `settings`."""
    hf = hf_keys(hf)
    heads, width = hf["num_attention_heads"], hf["hidden_size"]
    head_dim = hf.get("head_dim")
    shared = dict(
        family=family, vocab_size=hf["vocab_size"], context_length=hf["max_position_embeddings"],
        n_layers=hf["num_hidden_layers"], n_heads=heads, n_kv_heads=hf.get("num_key_value_heads") or heads,
        d_model=width, d_ff=hf["intermediate_size"], norm="rmsnorm", norm_eps=hf.get("rms_norm_eps", 1e-6),
        ffn="swiglu", positions="rope", rope_base=float(hf.get("rope_theta", 10000.0)), bias=False,
        tie_embeddings=hf.get("tie_word_embeddings", tie_default),
        head_size=head_dim if head_dim is not None and not same_value(head_dim, width // heads) else None,
        **rope_settings(hf))
    return ModelConfig(**shared | settings)


def rope_settings(hf: dict, params: dict | None = None) -> dict:
    """Our rope_scaling fields for config.json `hf`'s RoPE (transformers 5's `rope_parameters` or the older
    `rope_scaling`; `params` when the caller picked a layer type's own), refusing a kind lmlab does not compute."""
    if params is None:
        params = hf.get("rope_parameters")  # transformers 5 reads it over the older rope_scaling
        params = params if isinstance(params, dict) else hf.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise LmlabError(f"rope_parameters={params!r} is not a mapping; fix config.json")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in _ROPE_TYPES:
        raise LmlabError(f"RoPE scaling {kind!r} is not supported; lmlab computes {', '.join(_ROPE_TYPES)}")
    unknown = sorted(set(params) - set(_ROPE_KEYS) - _ROPE_IGNORED)
    if unknown or not params.get("truncate", True):
        raise LmlabError(f"rope_parameters {unknown or ['truncate']} change RoPE in a way lmlab does not compute; "
                         "this model is not supported yet")
    if "rope_theta" in hf and "rope_theta" in params and not same_value(hf["rope_theta"], params["rope_theta"]):
        raise LmlabError(f"rope_theta={hf['rope_theta']!r} disagrees with rope_parameters' rope_theta="
                         f"{params['rope_theta']!r}; fix one of them")
    if kind == "default":
        return {}
    return {"rope_scaling": _ROPE_TYPES[kind]} | {ours: params[key] for key, ours in _ROPE_KEYS.items()
                                                    if params.get(key) is not None}


def rope_to_hf(cfg: ModelConfig) -> dict:
    """config.json's RoPE keys for `cfg`: rope_theta, and rope_scaling (read by transformers 4 and 5; None when
    unscaled, so a file that scales while its "lmlab" section does not is seen to disagree)."""
    if cfg.rope_scaling == "none":
        return {"rope_theta": cfg.rope_base, "rope_scaling": None}
    params = {key: getattr(cfg, _ROPE_KEYS[key]) for key in _ROPE_WRITTEN[cfg.rope_scaling]
              if getattr(cfg, _ROPE_KEYS[key]) is not None}
    return {"rope_theta": cfg.rope_base, "rope_scaling": {"rope_type": cfg.rope_scaling} | params}


def config_to_hf(cfg: ModelConfig) -> dict:
    return decoder_config_to_hf(cfg, "LlamaForCausalLM", "llama") | {
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}


def decoder_config_to_hf(cfg: ModelConfig, architecture: str, model_type: str) -> dict:
    """The config.json keys the Llama-like families share, for `cfg`."""
    return {
        "architectures": [architecture], "model_type": model_type, "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.context_length, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.head_dim, "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff,
        "rms_norm_eps": cfg.norm_eps, "tie_word_embeddings": cfg.tie_embeddings, "attention_dropout": cfg.dropout,
    } | rope_to_hf(cfg)


def from_hf(hf_state: dict[str, torch.Tensor], cfg: ModelConfig, layout: Layout = LAYOUT) -> dict[str, torch.Tensor]:
    """HF tensors -> our state dict."""
    ours = {k: hf_state[v] for k, v in layout.top.items()}
    ours |= layers_from_hf(hf_state, layout.prefix, cfg.n_layers, layout.layer, layout.stacked)
    ours["lm_head.weight"] = hf_state[layout.top["token_embedding.weight"]] if cfg.tie_embeddings \
        else hf_state["lm_head.weight"]
    if layout.norm_offset:  # in fp32, as Gemma adds it: 1 + w in a bf16 file's own dtype would round w away
        ours = {k: v.float() + layout.norm_offset if _is_norm(k) else v for k, v in ours.items()}
    return ours


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig, layout: Layout = LAYOUT) -> dict[str, torch.Tensor]:
    """Our state dict -> HF tensors (the tied LM head is left out, as HF saves it)."""
    if layout.norm_offset:
        state = {k: v - layout.norm_offset if _is_norm(k) else v for k, v in state.items()}
    hf = {v: state[k] for k, v in layout.top.items()}
    qkv = [cfg.n_heads * cfg.head_dim] + [(cfg.n_kv_heads or cfg.n_heads) * cfg.head_dim] * 2
    sizes = {"attention.qkv.weight": qkv, "attention.qkv.bias": qkv, "feed_forward.gate_up.weight": [cfg.d_ff] * 2}
    hf |= layers_to_hf(state, layout.prefix, cfg.n_layers, layout.layer, layout.stacked, sizes)
    if not cfg.tie_embeddings:
        hf["lm_head.weight"] = state["lm_head.weight"]
    return hf


def _is_norm(name: str) -> bool:
    """Whether our tensor `name` is a norm's weight (norm.weight, blocks.3.post_norm1.weight, ….q_norm.weight)."""
    parts = name.split(".")
    return len(parts) >= 2 and "norm" in parts[-2]
