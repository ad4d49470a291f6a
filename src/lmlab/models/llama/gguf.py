"""Llama <-> GGUF (llama.cpp's format): config from metadata keys, tensor names both ways.

llama.cpp's converter reorders the rows of W_q and W_k: within each head, HF pairs feature i with
feature i + head_dim/2 for rotation, llama.cpp pairs 2i with 2i+1. Loading undoes that reordering,
so our HF-style rotary embedding gives the same scores; writing applies it again.
"""

import math
import re

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError

ARCHITECTURE = "llama"

_LAYER = {  # lmlab name (after blocks.{i}.) -> GGUF name (after blk.{i}.)
    "norm1.weight": "attn_norm.weight",
    "attention.out.weight": "attn_output.weight",
    "norm2.weight": "ffn_norm.weight",
    "feed_forward.down.weight": "ffn_down.weight",
}
_STACKED = {  # lmlab name -> GGUF names stacked along dim 0, in order
    "attention.qkv.weight": ("attn_q.weight", "attn_k.weight", "attn_v.weight"),
    "feed_forward.gate_up.weight": ("ffn_gate.weight", "ffn_up.weight"),
}
_TOP = {"token_embedding.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
_LM_HEAD = "output.weight"  # absent when the LM head is tied to the embedding


# The llama.* metadata keys and what lmlab does with each. llama.cpp gives variants of the architecture
# keys of their own (experts, sliding windows, logit soft-capping, scaled or partial RoPE, separate head
# sizes), so a key outside this table is refused rather than ignored: ignoring it would compute another model.
READ_KEYS = {"context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
             "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.freq_base"}  # into the config
HEAD_SIZE_KEYS = {"rope.dimension_count", "attention.key_length", "attention.value_length"}  # must be head_dim
FIXED_KEYS = {"expert_count": 0, "expert_used_count": 0, "rope.scaling.type": "none", "rope.scaling.factor": 1.0}
# Keys that change nothing here: the vocabulary size (checked against the embedding), and the context a
# scaled RoPE was trained for, which means nothing while rope.scaling.type is none.
HARMLESS_KEYS = {"vocab_size", "rope.scaling.original_context_length", "rope.scaling.finetuned"}
KNOWN_KEYS = READ_KEYS | HEAD_SIZE_KEYS | set(FIXED_KEYS) | HARMLESS_KEYS


def config_from_gguf(meta: dict, shapes: dict[str, tuple[int, ...]]) -> ModelConfig:
    """Our config from a GGUF file's metadata (key -> value) and tensor shapes (name -> (out, in)).

    The vocabulary size is the embedding's row count; the LM head is tied when there is no `output.weight`.
    Every key must have its type and a sensible value, and block_count must be the number of `blk.N`
    layers the tensors hold: a damaged header is refused here, before anything is built.
    """
    def key(name: str, kind: type, default=None):
        value = meta.get(f"{ARCHITECTURE}.{name}", default)
        if value is None:
            raise LmlabError(f"GGUF metadata lacks '{ARCHITECTURE}.{name}'; the file is incomplete, re-convert it")
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (kind is int and not isinstance(value, int)) or not math.isfinite(value) or value <= 0:
            raise LmlabError(f"GGUF metadata '{ARCHITECTURE}.{name}'={value!r} is not a positive "
                             f"{'integer' if kind is int else 'finite number'}; the file is damaged, download it again")
        return kind(value)

    if _TOP["token_embedding.weight"] not in shapes:
        raise LmlabError(f"GGUF file lacks tensor '{_TOP['token_embedding.weight']}'; it does not hold a complete "
                         f"{ARCHITECTURE} model")
    check_known_keys(meta)
    n_layers = key("block_count", int)
    layers = {int(m[1]) for name in shapes if (m := re.match(r"blk\.(\d+)\.", name))}
    if n_layers != len(layers) or layers != set(range(n_layers)):  # the count first: no huge range built
        raise LmlabError(f"GGUF metadata says {ARCHITECTURE}.block_count={n_layers} but the tensors hold layers "
                         f"{_ranges(layers)}; the file is damaged, download it again")
    n_heads, d_model = key("attention.head_count", int), key("embedding_length", int)
    n_kv_heads = key("attention.head_count_kv", int, n_heads)
    if d_model % n_heads or n_heads % n_kv_heads or d_model // n_heads % 2:
        raise LmlabError(f"GGUF metadata: embedding_length={d_model}, head_count={n_heads} and head_count_kv="
                         f"{n_kv_heads} do not divide into even-sized heads; the file is damaged, download it again")
    head_dim = d_model // n_heads
    for name in sorted(HEAD_SIZE_KEYS):
        if key(name, int, head_dim) != head_dim:
            raise LmlabError(f"GGUF metadata '{ARCHITECTURE}.{name}'={meta[f'{ARCHITECTURE}.{name}']} differs from "
                             f"embedding_length / head_count = {head_dim}; lmlab's {ARCHITECTURE} has one head size "
                             "for queries, keys, values and rotary positions")
    vocab_size = shapes[_TOP["token_embedding.weight"]][0]
    if key("vocab_size", int, vocab_size) != vocab_size:
        raise LmlabError(f"GGUF metadata '{ARCHITECTURE}.vocab_size'={meta[f'{ARCHITECTURE}.vocab_size']} but "
                         f"{_TOP['token_embedding.weight']} has {vocab_size} rows; the file is damaged, download it "
                         "again")
    return ModelConfig(
        family="llama", vocab_size=vocab_size, context_length=key("context_length", int),
        n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
        d_model=d_model, d_ff=key("feed_forward_length", int), norm="rmsnorm",
        norm_eps=key("attention.layer_norm_rms_epsilon", float), ffn="swiglu", positions="rope",
        rope_base=key("rope.freq_base", float, 10000.0), bias=False,
        tie_embeddings=_LM_HEAD not in shapes,
    )


def check_known_keys(meta: dict) -> None:
    """Every llama.* key of `meta` is one lmlab honours (`KNOWN_KEYS`), and those with a fixed value hold it."""
    prefix = f"{ARCHITECTURE}."
    unknown = sorted(k for k in meta if k.startswith(prefix) and k.removeprefix(prefix) not in KNOWN_KEYS)
    if unknown:
        raise LmlabError(f"GGUF metadata '{unknown[0]}'={meta[unknown[0]]!r} belongs to a {ARCHITECTURE} variant lmlab "
                         "does not compute (docs/real-models.md lists the keys it reads); this model is not supported "
                         "yet")
    for name, value in FIXED_KEYS.items():
        found = meta.get(prefix + name, value)
        if found != value or isinstance(found, bool):
            raise LmlabError(f"GGUF metadata '{prefix}{name}'={found!r}, but lmlab's {ARCHITECTURE} computes {value!r} "
                             "only (no experts, no RoPE scaling); this model is not supported yet")


def _ranges(layers: set[int]) -> str:
    """"0-29" for a run of layer numbers, else the first few."""
    if not layers:
        return "none"
    ordered = sorted(layers)
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(map(str, ordered[:5])) + (", …" if len(ordered) > 5 else "")


def from_gguf(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """GGUF tensors (dequantized, (out, in) like `nn.Linear`) -> our state dict.

    Every tensor must find a place: a missing one or an extra one (say, the biases of a variant)
    means the file holds a model this converter does not describe.
    """
    left = dict(tensors)

    def take(name: str) -> torch.Tensor:
        if name not in left:
            raise LmlabError(f"GGUF file lacks tensor '{name}'; it does not hold a complete {ARCHITECTURE} model")
        return left.pop(name)

    ours = {name: take(g) for name, g in _TOP.items()}
    kv_heads = cfg.n_kv_heads or cfg.n_heads
    for i in range(cfg.n_layers):
        for name, g in _LAYER.items():
            ours[f"blocks.{i}.{name}"] = take(f"blk.{i}.{g}")
        blk = {part: take(f"blk.{i}.{part}") for parts in _STACKED.values() for part in parts}
        blk["attn_q.weight"] = _pair_halves(blk["attn_q.weight"], cfg.n_heads)
        blk["attn_k.weight"] = _pair_halves(blk["attn_k.weight"], kv_heads)
        for name, parts in _STACKED.items():
            ours[f"blocks.{i}.{name}"] = torch.cat([blk[p] for p in parts], dim=0)
    ours["lm_head.weight"] = ours["token_embedding.weight"] if cfg.tie_embeddings else take(_LM_HEAD)
    if left:
        raise LmlabError(f"GGUF tensors {sorted(left)[:3]} have no place in lmlab's {ARCHITECTURE} model; this "
                         "variant is not supported yet")
    return ours


def to_gguf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> GGUF tensors in llama.cpp's layout (what a GGUF writer stores)."""
    gguf = {g: state[name] for name, g in _TOP.items()}
    kv_heads = cfg.n_kv_heads or cfg.n_heads
    kv_dim = kv_heads * cfg.head_dim
    sizes = {"attention.qkv.weight": [cfg.d_model, kv_dim, kv_dim], "feed_forward.gate_up.weight": [cfg.d_ff, cfg.d_ff]}
    for i in range(cfg.n_layers):
        for name, g in _LAYER.items():
            gguf[f"blk.{i}.{g}"] = state[f"blocks.{i}.{name}"]
        for name, parts in _STACKED.items():
            for part, tensor in zip(parts, state[f"blocks.{i}.{name}"].split(sizes[name], dim=0)):
                gguf[f"blk.{i}.{part}"] = tensor
        gguf[f"blk.{i}.attn_q.weight"] = _interleave_halves(gguf[f"blk.{i}.attn_q.weight"], cfg.n_heads)
        gguf[f"blk.{i}.attn_k.weight"] = _interleave_halves(gguf[f"blk.{i}.attn_k.weight"], kv_heads)
    if not cfg.tie_embeddings:
        gguf[_LM_HEAD] = state["lm_head.weight"]
    return gguf


def config_to_gguf(cfg: ModelConfig) -> dict[str, int | float]:
    """The `llama.*` metadata keys that describe `cfg` (the inverse of `config_from_gguf`)."""
    return {
        f"{ARCHITECTURE}.vocab_size": cfg.vocab_size, f"{ARCHITECTURE}.context_length": cfg.context_length,
        f"{ARCHITECTURE}.block_count": cfg.n_layers, f"{ARCHITECTURE}.embedding_length": cfg.d_model,
        f"{ARCHITECTURE}.feed_forward_length": cfg.d_ff, f"{ARCHITECTURE}.attention.head_count": cfg.n_heads,
        f"{ARCHITECTURE}.attention.head_count_kv": cfg.n_kv_heads or cfg.n_heads,
        f"{ARCHITECTURE}.rope.freq_base": cfg.rope_base, f"{ARCHITECTURE}.rope.dimension_count": cfg.head_dim,
        f"{ARCHITECTURE}.attention.layer_norm_rms_epsilon": cfg.norm_eps,
    }


def _pair_halves(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp row order (pairs 2i, 2i+1 per head) -> HF order (pairs i, i + head_dim/2)."""
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def _interleave_halves(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """HF row order -> llama.cpp row order; the inverse of `_pair_halves`."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)
