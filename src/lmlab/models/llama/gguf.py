"""Llama <-> GGUF (llama.cpp's format), and the pieces the GGUF conversions of the Llama-like families
(Qwen2, Qwen3, Gemma 2/3, Phi-3, OLMo 2) are diffs of: where each tensor sits (a `GGUFLayout`), which
metadata keys an architecture may hold, and the keys they share (`decoder_config`).

llama.cpp's converter reorders the rows of W_q and W_k for the "llama" architecture only: within each head,
HF pairs feature i with feature i + head_dim/2 for rotation, llama.cpp's "normal" RoPE pairs 2i with 2i+1.
Loading undoes that reordering (`GGUFLayout.permuted`), so our HF-style rotary embedding gives the same
scores; writing applies it again. The other families run llama.cpp's "neox" RoPE, HF's pairing: no reordering.

Every key of a file's architecture must be one lmlab reads or knows to change nothing (`SHARED_KEYS` plus the
family's own); any other is refused rather than ignored, since ignoring it would compute another model.
"""

import dataclasses
import math
import re
from dataclasses import dataclass

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.models.llama.rope_freqs import ROPE_FREQS, llama3_factors, llama3_settings

ARCHITECTURE = "llama"


@dataclass(frozen=True)
class GGUFLayout:
    """Where our tensors sit in a family's GGUF file: per layer (after `blocks.{i}.` and `blk.{i}.`) one tensor
    each (`layer`) or several stacked along dim 0 (`stacked`), the rest by full name (`top`); `permuted`: the
    q/k rows are in llama.cpp's pairing (see the module's docstring)."""

    layer: dict[str, str]  # our name -> GGUF name, both within layer i
    stacked: dict[str, tuple[str, ...]]  # our name -> GGUF names stacked along dim 0, in order
    top: dict[str, str]  # our name -> GGUF name, outside the layers
    permuted: bool = False

    def replace(self, **changes) -> "GGUFLayout":
        return dataclasses.replace(self, **changes)


LAYOUT = GGUFLayout(
    layer={"norm1.weight": "attn_norm.weight", "attention.out.weight": "attn_output.weight",
           "norm2.weight": "ffn_norm.weight", "feed_forward.down.weight": "ffn_down.weight"},
    stacked={"attention.qkv.weight": ("attn_q.weight", "attn_k.weight", "attn_v.weight"),
             "feed_forward.gate_up.weight": ("ffn_gate.weight", "ffn_up.weight")},
    top={"token_embedding.weight": "token_embd.weight", "norm.weight": "output_norm.weight"},
    permuted=True,
)
QKV_BIAS = {"attention.qkv.bias": ("attn_q.bias", "attn_k.bias", "attn_v.bias")}
QK_NORMS = {"attention.q_norm.weight": "attn_q_norm.weight", "attention.k_norm.weight": "attn_k_norm.weight"}
POST_NORMS = {"post_norm1.weight": "post_attention_norm.weight", "post_norm2.weight": "post_ffw_norm.weight"}
LM_HEAD = "output.weight"  # absent when the LM head is tied to the embedding
_PERMUTED = {"attn_q": "n_heads", "attn_k": "n_kv_heads"}  # the reordered tensors and their heads

# The keys every Llama-like architecture may hold (after "{arch}."): read into the config, checked against it
# (the head sizes; vocab_size against the embedding) or changing nothing here (the context a scaled RoPE was
# trained for, except for YaRN, which is refused). A family adds its own.
SHARED_KEYS = {"context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
               "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.freq_base",
               "rope.dimension_count", "attention.key_length", "attention.value_length", "vocab_size",
               "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
               "rope.scaling.finetuned", "expert_count", "expert_used_count"}
FIXED_KEYS = {"expert_count": 0, "expert_used_count": 0}  # a key that must hold this value, if present
ROPE_SCALING = {"none": "none", "linear": "linear"}  # rope.scaling.type -> ours (yarn, longrope: refused)
KNOWN_KEYS = SHARED_KEYS | {"attention.sliding_window"}  # llama's: a window makes it Mistral


def config_from_gguf(meta: dict, shapes: dict[str, tuple[int, ...]], values=None) -> ModelConfig:
    """Our config from a "llama" GGUF file's metadata and tensor shapes (see `decoder_config`): Llama, or Mistral
    where the file names a sliding window (llama.cpp's converter writes none: it reads as Llama). Llama 3.1's
    scaled RoPE is the `rope_freqs` tensor (`values(name)` gives its numbers)."""
    check_known_keys(meta, ARCHITECTURE, KNOWN_KEYS)
    window = sliding_window(meta, ARCHITECTURE)
    rope = _rope_freqs(meta, shapes, values)
    if rope and rope_scaling(meta, ARCHITECTURE):
        raise LmlabError(f"the GGUF file scales RoPE twice ({ROPE_FREQS} and llama.rope.scaling.type="
                         f"{meta['llama.rope.scaling.type']!r}); lmlab computes one scaling, so this model is not "
                         "supported yet")
    return decoder_config(meta, shapes, ARCHITECTURE, "mistral" if window else "llama",
                          **({"sliding_window": window} if window else {}), **rope)


def _rope_freqs(meta: dict, shapes: dict, values) -> dict:
    """Our llama3 RoPE settings for the file's `rope_freqs` tensor ({} without one)."""
    if ROPE_FREQS not in shapes:
        return {}
    if values is None:
        raise LmlabError(f"the GGUF file's {ROPE_FREQS} (Llama 3.1's scaled RoPE) is read with the file's tensors; "
                         "load the file with lmlab.load")
    head_dim = key(meta, ARCHITECTURE, "rope.dimension_count", int, head_size(meta, ARCHITECTURE))
    if shapes[ROPE_FREQS] != (head_dim // 2,):
        raise LmlabError(f"GGUF tensor '{ROPE_FREQS}' has shape {shapes[ROPE_FREQS]}, not ({head_dim // 2},) (half "
                         "the rotated head size); the file is damaged, download it again")
    return llama3_settings(values(ROPE_FREQS), head_dim, key(meta, ARCHITECTURE, "rope.freq_base", float, 10000.0))


def decoder_config(meta: dict, shapes: dict[str, tuple[int, ...]], arch: str, family: str,
                   **settings) -> ModelConfig:
    """Our config from a GGUF file's metadata (key -> value) and tensor shapes (name -> (out, in)): the keys the
    Llama-like architectures share (under `arch.`), then the family's own `settings`.

    The vocabulary size is the embedding's row count; the LM head is tied when there is no `output.weight`.
    Every key must have its type and a sensible value, and block_count must be the number of `blk.N`
    layers the tensors hold: a damaged header is refused here, before anything is built.
    """
    if LAYOUT.top["token_embedding.weight"] not in shapes:
        raise LmlabError(f"GGUF file lacks tensor '{LAYOUT.top['token_embedding.weight']}'; it does not hold a "
                         f"complete {arch} model")
    for name, value in FIXED_KEYS.items():
        found = meta.get(f"{arch}.{name}", value)
        if found != value or isinstance(found, bool):
            raise LmlabError(f"GGUF metadata '{arch}.{name}'={found!r}, but lmlab's {arch} computes {value!r} only "
                             "(no experts); this model is not supported yet")
    n_layers = key(meta, arch, "block_count", int)
    layers = {int(m[1]) for name in shapes if (m := re.match(r"blk\.(\d+)\.", name))}
    if n_layers != len(layers) or layers != set(range(n_layers)):  # the count first: no huge range built
        raise LmlabError(f"GGUF metadata says {arch}.block_count={n_layers} but the tensors hold layers "
                         f"{_ranges(layers)}; the file is damaged, download it again")
    n_heads, d_model = key(meta, arch, "attention.head_count", int), key(meta, arch, "embedding_length", int)
    n_kv_heads = key(meta, arch, "attention.head_count_kv", int, n_heads)
    head_dim = head_size(meta, arch)
    if n_heads % n_kv_heads or head_dim % 2:
        raise LmlabError(f"GGUF metadata: embedding_length={d_model}, head_count={n_heads}, head_count_kv="
                         f"{n_kv_heads} and a head size of {head_dim} do not divide into groups of even-sized heads; "
                         "the file is damaged, download it again")
    if key(meta, arch, "rope.dimension_count", int, head_dim) != head_dim:
        said = "attention.key_length" if f"{arch}.attention.key_length" in meta else "embedding_length / head_count"
        raise LmlabError(f"GGUF metadata '{arch}.rope.dimension_count'={meta[f'{arch}.rope.dimension_count']} "
                         f"differs from {said} = {head_dim}; lmlab rotates whole heads (RoPE on part of each head is "
                         "not computed), so this model is not supported yet")
    vocab_size = shapes[LAYOUT.top["token_embedding.weight"]][0]
    if key(meta, arch, "vocab_size", int, vocab_size) != vocab_size:
        raise LmlabError(f"GGUF metadata '{arch}.vocab_size'={meta[f'{arch}.vocab_size']} but token_embd.weight has "
                         f"{vocab_size} rows; the file is damaged, download it again")
    shared = dict(
        family=family, vocab_size=vocab_size, context_length=key(meta, arch, "context_length", int),
        n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, d_model=d_model,
        d_ff=key(meta, arch, "feed_forward_length", int), norm="rmsnorm",
        norm_eps=key(meta, arch, "attention.layer_norm_rms_epsilon", float), ffn="swiglu", positions="rope",
        rope_base=key(meta, arch, "rope.freq_base", float, 10000.0), bias=False, tie_embeddings=LM_HEAD not in shapes,
        head_size=head_dim if head_dim * n_heads != d_model else None, **rope_scaling(meta, arch))
    return ModelConfig(**shared | settings)


def head_size(meta: dict, arch: str) -> int:
    """The head size: attention.key_length (= value_length: lmlab has one), else embedding_length / head_count."""
    n_heads, d_model = key(meta, arch, "attention.head_count", int), key(meta, arch, "embedding_length", int)
    if "attention.key_length" not in _arch_keys(meta, arch) and d_model % n_heads:
        raise LmlabError(f"GGUF metadata: embedding_length={d_model} and head_count={n_heads} do not divide into "
                         f"heads, and no {arch}.attention.key_length says their size; the file is damaged, download it "
                         "again")
    head_dim = key(meta, arch, "attention.key_length", int, d_model // n_heads)
    if key(meta, arch, "attention.value_length", int, head_dim) != head_dim:
        raise LmlabError(f"GGUF metadata '{arch}.attention.value_length'={meta[f'{arch}.attention.value_length']} "
                         f"differs from key_length {head_dim}; lmlab's heads have one size for keys and values")
    return head_dim


def rope_scaling(meta: dict, arch: str) -> dict:
    """Our rope_scaling fields for the file's rope.scaling keys: none, or linear (llama.cpp divides the
    frequencies by the factor, as HF's linear scaling does); YaRN and LongRoPE are refused."""
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    if kind not in ROPE_SCALING:
        raise LmlabError(f"GGUF metadata '{arch}.rope.scaling.type'={kind!r}: lmlab reads "
                         f"{' and '.join(ROPE_SCALING)} RoPE scaling from GGUF; this model is not supported yet")
    factor = key(meta, arch, "rope.scaling.factor", float, 1.0)
    if kind == "none" or factor == 1.0:
        if factor != 1.0:
            raise LmlabError(f"GGUF metadata '{arch}.rope.scaling.factor'={factor} with no rope.scaling.type; the "
                             "file is damaged, download it again")
        return {}
    return {"rope_scaling": ROPE_SCALING[kind], "rope_factor": factor}


def window_settings(meta: dict, arch: str, n_layers: int, pattern: int, default: int | None = None) -> dict:
    """Our sliding_window and global_every for the file's attention.sliding_window (0: none; `default` when
    absent) and attention.sliding_window_pattern: as llama.cpp reads it, a number k (layer i is local unless
    i % k == k - 1; `pattern` when absent) or one flag per layer (local or not), a global layer every k."""
    window = sliding_window(meta, arch) if f"{arch}.attention.sliding_window" in meta else default
    if window is None:
        return {}
    found = meta.get(f"{arch}.attention.sliding_window_pattern", pattern)
    if isinstance(found, list):  # k = n_layers + 1: every layer local
        every = next((k for k in range(1, n_layers + 2) if found == [(i + 1) % k != 0 for i in range(n_layers)]), None)
        if every is None:
            raise LmlabError(f"GGUF metadata '{arch}.attention.sliding_window_pattern'={str(found)[:80]} is not a "
                             "global layer every k layers, the rest local; lmlab computes that pattern only")
    elif isinstance(found, int) and not isinstance(found, bool) and found >= 0:
        every = found
    else:
        raise LmlabError(f"GGUF metadata '{arch}.attention.sliding_window_pattern'={found!r} is not a layer count; "
                         "the file is damaged, download it again")
    if every == 1:  # every layer global
        return {}
    return {"sliding_window": window, "global_every": every if every <= n_layers else 0}


def sliding_window(meta: dict, arch: str) -> int | None:
    """The file's attention.sliding_window; None when it is absent or 0 (llama.cpp's "no window")."""
    return key(meta, arch, "attention.sliding_window", int) if meta.get(f"{arch}.attention.sliding_window") else None


def key(meta: dict, arch: str, name: str, kind: type, default=None):
    """The positive number `arch.name` of `meta` as `kind` (int or float), or `default` when it is absent."""
    value = meta.get(f"{arch}.{name}", default)
    if value is None:
        raise LmlabError(f"GGUF metadata lacks '{arch}.{name}'; the file is incomplete, re-convert it")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or (kind is int and not isinstance(value, int)) or not math.isfinite(value) or value <= 0:
        raise LmlabError(f"GGUF metadata '{arch}.{name}'={value!r} is not a positive "
                         f"{'integer' if kind is int else 'finite number'}; the file is damaged, download it again")
    return kind(value)


def check_known_keys(meta: dict, arch: str, known: set[str]) -> None:
    """Every `arch.*` key of `meta` is one lmlab honours (`known`)."""
    unknown = sorted(f"{arch}.{k}" for k in _arch_keys(meta, arch) if k not in known)
    if unknown:
        raise LmlabError(f"GGUF metadata '{unknown[0]}'={meta[unknown[0]]!r} belongs to a {arch} variant lmlab "
                         "does not compute (docs/real-models.md lists the keys it reads); this model is not supported "
                         "yet")


def _arch_keys(meta: dict, arch: str) -> set[str]:
    return {k.removeprefix(f"{arch}.") for k in meta if k.startswith(f"{arch}.")}


def _ranges(layers: set[int]) -> str:
    """"0-29" for a run of layer numbers, else the first few."""
    if not layers:
        return "none"
    ordered = sorted(layers)
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(map(str, ordered[:5])) + (", …" if len(ordered) > 5 else "")


def from_gguf(tensors: dict[str, torch.Tensor], cfg: ModelConfig, layout: GGUFLayout = LAYOUT,
              arch: str = ARCHITECTURE) -> dict[str, torch.Tensor]:
    """GGUF tensors (dequantized, (out, in) like `nn.Linear`) -> our state dict.

    Every tensor must find a place: a missing one or an extra one (say, the biases of a variant) means the
    file holds a model this converter does not describe. Only rows are taken, stacked and reordered, so the
    same runs on row labels (`quantized_gguf.row_sources`). `rope_freqs` is a setting, read into the config.
    """
    left = {name: t for name, t in tensors.items() if name != ROPE_FREQS}

    def take(name: str) -> torch.Tensor:
        if name not in left:
            raise LmlabError(f"GGUF file lacks tensor '{name}'; it does not hold a complete {arch} model")
        return left.pop(name)

    ours = {name: take(g) for name, g in layout.top.items()}
    for i in range(cfg.n_layers):
        for name, g in layout.layer.items():
            ours[f"blocks.{i}.{name}"] = take(f"blk.{i}.{g}")
        for name, parts in layout.stacked.items():
            blk = [_reordered(take(f"blk.{i}.{p}"), p, cfg, layout, _pair_halves) for p in parts]
            ours[f"blocks.{i}.{name}"] = torch.cat(blk, dim=0)
    ours["lm_head.weight"] = ours["token_embedding.weight"] if cfg.tie_embeddings else take(LM_HEAD)
    if left:
        raise LmlabError(f"GGUF tensors {sorted(left)[:3]} have no place in lmlab's {arch} model; this "
                         "variant is not supported yet")
    return ours


def to_gguf(state: dict[str, torch.Tensor], cfg: ModelConfig, layout: GGUFLayout = LAYOUT) -> dict[str, torch.Tensor]:
    """Our state dict -> GGUF tensors in llama.cpp's layout (what a GGUF writer stores); a llama3-scaled RoPE
    as its `rope_freqs`."""
    gguf = {g: state[name] for name, g in layout.top.items()}
    kv_dim = (cfg.n_kv_heads or cfg.n_heads) * cfg.head_dim
    qkv = [cfg.n_heads * cfg.head_dim, kv_dim, kv_dim]
    sizes = {"attention.qkv.weight": qkv, "attention.qkv.bias": qkv, "feed_forward.gate_up.weight": [cfg.d_ff] * 2}
    for i in range(cfg.n_layers):
        for name, g in layout.layer.items():
            gguf[f"blk.{i}.{g}"] = state[f"blocks.{i}.{name}"]
        for name, parts in layout.stacked.items():
            for part, tensor in zip(parts, state[f"blocks.{i}.{name}"].split(sizes[name], dim=0)):
                gguf[f"blk.{i}.{part}"] = _reordered(tensor, part, cfg, layout, _interleave_halves)
    if not cfg.tie_embeddings:
        gguf[LM_HEAD] = state["lm_head.weight"]
    if cfg.rope_scaling == "llama3":
        gguf[ROPE_FREQS] = llama3_factors(cfg)
    return gguf


def config_to_gguf(cfg: ModelConfig, arch: str = ARCHITECTURE) -> dict[str, int | float]:
    """The `arch.*` metadata keys that describe `cfg` (the inverse of `decoder_config`): the keys the Llama-like
    architectures share, linear RoPE scaling, and a sliding window on every layer (Mistral, read back from
    "llama"). A family's own keys are its `config_to_gguf`'s; llama3-scaled RoPE is the `rope_freqs` tensor."""
    keys = {
        "vocab_size": cfg.vocab_size, "context_length": cfg.context_length, "block_count": cfg.n_layers,
        "embedding_length": cfg.d_model, "feed_forward_length": cfg.d_ff, "attention.head_count": cfg.n_heads,
        "attention.head_count_kv": cfg.n_kv_heads or cfg.n_heads, "rope.freq_base": cfg.rope_base,
        "rope.dimension_count": cfg.head_dim, "attention.layer_norm_rms_epsilon": cfg.norm_eps,
    } | ({"attention.key_length": cfg.head_dim, "attention.value_length": cfg.head_dim}
         if cfg.head_size is not None else {}) | (
        {"rope.scaling.type": "linear", "rope.scaling.factor": float(cfg.rope_factor)}
        if cfg.rope_scaling == "linear" else {}) | (
        {"attention.sliding_window": cfg.sliding_window} if cfg.sliding_window and not cfg.global_every else {})
    return {f"{arch}.{name}": value for name, value in keys.items()}


def _reordered(w: torch.Tensor, part: str, cfg: ModelConfig, layout: GGUFLayout, reorder) -> torch.Tensor:
    """`w` (the GGUF tensor `part`) with its rows reordered by `reorder` where the layout is permuted and `part`
    is a query or key projection."""
    heads = _PERMUTED.get(part.split(".")[0]) if layout.permuted else None
    if heads is None:
        return w
    return reorder(w, getattr(cfg, heads) or cfg.n_heads)


def _pair_halves(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp row order (pairs 2i, 2i+1 per head) -> HF order (pairs i, i + head_dim/2)."""
    rows, rest = w.shape[0], w.shape[1:]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *rest).transpose(1, 2).reshape(w.shape)


def _interleave_halves(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """HF row order -> llama.cpp row order; the inverse of `_pair_halves`."""
    rows, rest = w.shape[0], w.shape[1:]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *rest).transpose(1, 2).reshape(w.shape)
