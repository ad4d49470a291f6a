"""Scaled dot-product attention and the multi-head / grouped-query layers built on it.

One function, `attend`, does the maths two ways: the fused path (torch SDPA, fast, no weights)
and the explicit path (softmax(QK^T / sqrt(d)) V written out, can return the weights for
attention maps). Tests check the two agree. `SelfAttention` and `CrossAttention` share it.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.errors import LmlabError
from lmlab.modules.fused_rope import fused_rotary
from lmlab.modules.kv_cache import LayerKV


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(scale * q k^T + mask) v, with grouped-query heads; scale defaults to 1/sqrt(head_dim).

    q: (B, H, T, D); k, v: (B, H_kv, S, D) with H a multiple of H_kv (query head h reads kv head
    h // (H / H_kv)); mask (B or 1, H or 1, T, S): bool, True where a query may look, or float,
    added to the scores (T5's relative position bias, with -inf where a query may not look).
    `softcap` bounds the scores to (-cap, cap) by cap * tanh(score / cap) before the mask (Gemma 2);
    SDPA has no such step, so it takes the explicit path.
    Returns the output (B, H, T, D) and, if `need_weights`, the weights (B, H, T, S).
    """
    if not need_weights and softcap is None:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=_decided(is_causal and mask is None),
            dropout_p=dropout_p, enable_gqa=_decided(k.size(1) != q.size(1)), scale=scale,
        )
        return out, None
    groups = q.size(1) // k.size(1)
    k = k.repeat_interleave(groups, dim=1)  # (B, H, S, D)
    v = v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.size(-1)))  # (B, H, T, S)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is None and is_causal:
        T, S = scores.shape[-2:]
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    weights = scores.softmax(dim=-1)
    out = F.dropout(weights, dropout_p) @ v  # (B, H, T, D)
    return out, weights


def _decided(condition) -> bool:
    """`condition` as a plain bool. Traced by torch.compile with dynamic shapes, a comparison of sizes
    (T > 1, H_kv != H) is a symbolic bool, which SDPA refuses as an argument (a graph break); a branch
    on it makes the compiler settle it instead, with a guard that recompiles if the answer changes."""
    if condition:
        return True
    return False


class SelfAttention(nn.Module):
    """Multi-head self-attention; `n_kv_heads < n_heads` gives grouped-query (1 = multi-query).

    Q, K and V come from one fused projection (one matmul instead of three). Rotary positions,
    when the model uses them, are applied to q and k here; a KV cache, when given, holds the
    keys and values of earlier positions so decoding feeds one new token at a time. A `core`
    (`lmlab.modules.efficient_attention`) replaces the softmax over every key with an efficient
    method; it reads the mask only for which keys are padding (its last row).

    The variants of today's decoders are settings: `qkv_bias` (biases on q, k, v only: Qwen2),
    `q_norm` / `k_norm` (norms of queries and keys before the rotation, `QKNorm`: Qwen3, Gemma 3,
    OLMo 2) and `softcap` (bounded scores: Gemma 2).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, bias: bool = True,
                 dropout: float = 0.0, head_dim: int | None = None, scale: float | None = None,
                 core: nn.Module | None = None, qkv_bias: bool | None = None, q_norm: nn.Module | None = None,
                 k_norm: nn.Module | None = None, softcap: float | None = None):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        assert (head_dim or d_model % n_heads == 0) and n_heads % self.n_kv_heads == 0
        self.head_dim = head_dim or d_model // n_heads
        self.scale = scale  # None: 1/sqrt(head_dim); T5 folds it into its weights and uses 1
        self.qkv = nn.Linear(d_model, (n_heads + 2 * self.n_kv_heads) * self.head_dim,
                             bias=bias if qkv_bias is None else qkv_bias)
        self.out = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)
        self.q_norm, self.k_norm = q_norm, k_norm
        self.softcap = softcap
        self.dropout = dropout
        self.need_weights = False  # set True to keep the last attention map in `self.weights`
        self.weights: torch.Tensor | None = None
        self.core = core

    def check_map_exists(self) -> None:
        """Refuse, in one line, to keep an attention map (`need_weights`) that an efficient core never forms."""
        if self.need_weights and self.core is not None:
            raise LmlabError("this model's attention is an efficient method, which never forms the attention map; "
                             "inspect a model trained with --attention full")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                kv_cache: LayerKV | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        qkv = self.qkv(x).view(B, T, self.n_heads + 2 * self.n_kv_heads, self.head_dim).transpose(1, 2)
        # (B, H + H_kv, T, D), (B, H_kv, T, D)
        qk, v = qkv.split([self.n_heads + self.n_kv_heads, self.n_kv_heads], dim=1)
        if self.q_norm is not None:
            q, k = qk.split([self.n_heads, self.n_kv_heads], dim=1)
            qk = torch.cat([self.q_norm(q), self.k_norm(k)], dim=1)
        if rope is not None:
            qk = fused_rotary(qk, rope)  # queries and keys in one op
        q, k = qk.split([self.n_heads, self.n_kv_heads], dim=1)  # (B, H, T, D), (B, H_kv, T, D)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H_kv, S, D), S = cached + T
        if self.core is not None:
            self.check_map_exists()
            groups = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (B, H, S, D)
            y = self.core(q, k, v, None if mask is None else mask[:, 0, -1, :])  # keys the last query may see
            return self.out(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))
        # without a mask: causal over a full pass; a single new token sees every cached key
        y, self.weights = attend(q, k, v, mask, is_causal=mask is None and T > 1,
                                 dropout_p=self.dropout if self.training else 0.0,
                                 need_weights=self.need_weights, scale=self.scale, softcap=self.softcap)
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, C)
        return self.out(y)


class CrossAttention(nn.Module):
    """Multi-head attention of a sequence (queries) over another one (keys/values), e.g. a decoder
    reading an encoder's output.

    The keys and values depend on the memory only, so a decoder computes them once per source with
    `memory_kv` and passes them to every decoding step instead of re-projecting the memory.
    """

    def __init__(self, d_model: int, n_heads: int, d_memory: int | None = None, bias: bool = True,
                 dropout: float = 0.0, head_dim: int | None = None, scale: float | None = None):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = head_dim or d_model // n_heads
        inner = n_heads * self.head_dim
        self.q = nn.Linear(d_model, inner, bias=bias)
        self.kv = nn.Linear(d_memory or d_model, 2 * inner, bias=bias)
        self.out = nn.Linear(inner, d_model, bias=bias)
        self.dropout = dropout
        self.scale = scale
        self.need_weights = False
        self.weights: torch.Tensor | None = None

    def memory_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """memory (B, S, d_memory) -> keys, values (B, H, S, D)."""
        B, S, _ = memory.shape
        k, v = self.kv(memory).view(B, S, 2, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return k, v

    def forward(self, x: torch.Tensor, memory: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, C) over memory (B, S, d_memory), or its precomputed `memory_kv`, -> (B, T, C).

        memory_mask: (B, S) with 1 on real memory positions, or a ready attention mask
        (B or 1, H or 1, T or 1, S), bool or float (see `attend`).
        """
        B, T, _ = x.shape
        k, v = memory if isinstance(memory, tuple) else self.memory_kv(memory)  # (B, H, S, D)
        q = self.q(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        mask = memory_mask
        if mask is not None and mask.dim() == 2:
            mask = mask.bool()[:, None, None, :]  # (B, 1, 1, S)
        y, self.weights = attend(q, k, v, mask, dropout_p=self.dropout if self.training else 0.0,
                                 need_weights=self.need_weights, scale=self.scale)
        return self.out(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


def decoder_mask(attention_mask: torch.Tensor | None, T: int, S: int,
                 device: torch.device | None = None) -> torch.Tensor | None:
    """The bool mask (B or 1, 1, T, S) for T new queries over S keys (the last T of which are the
    queries themselves): causal, minus padded keys. None when no explicit mask is needed: a
    full causal pass (T == S) or one new token that sees every key (T == 1), both without padding.

    attention_mask: (B, S), 1 for real tokens, 0 for padding. Every query may always see itself,
    so a padded query's softmax never runs over an empty row (which would give NaN).
    """
    if attention_mask is None and (T == S or T == 1):
        return None
    causal = causal_mask(T, S, device)  # (1, 1, T, S)
    if attention_mask is None:
        return causal
    keep = causal & attention_mask.bool()[:, None, None, :]  # (B, 1, T, S)
    keep[..., torch.arange(T), torch.arange(S - T, S)] = True  # each query sees itself
    return keep


def windowed(mask: torch.Tensor | None, T: int, S: int, window: int, device: torch.device | None = None
             ) -> torch.Tensor | None:
    """`mask` (a `decoder_mask`, or None for plain causal) narrowed to a band: each query also sees only
    the `window` latest keys up to its own column, itself included (Mistral's sliding window, as HF
    computes it: key > query - window). A query's own column is the last one it may see, so the band
    follows every row's place, a left-padded batch's and the serving engine's slots alike. None when
    no query has more than `window` keys to see."""
    if S <= window:
        return mask
    keep = causal_mask(T, S, device) if mask is None else mask  # (B or 1, 1, T, S)
    columns = torch.arange(S, device=keep.device)  # (S,)
    own = torch.where(keep, columns, -1).amax(-1, keepdim=True)  # (B or 1, 1, T, 1): each query's column
    return keep & (columns > own - window)


def causal_mask(T: int, S: int, device: torch.device | None = None) -> torch.Tensor:
    """The bool mask (1, 1, T, S) for the last T of S positions: query i sees keys up to itself."""
    query_pos = torch.arange(S - T, S, device=device)[:, None]  # (T, 1)
    key_pos = torch.arange(S, device=device)[None, :]  # (1, S)
    return (key_pos <= query_pos)[None, None]


def padding_mask(attention_mask: torch.Tensor | None, T: int, device: torch.device) -> torch.Tensor:
    """The bool mask (B or 1, 1, 1, T) over keys: True where a query may look, i.e. at real tokens.

    Always a tensor, never None: `SelfAttention` reads a missing mask as "causal".
    """
    if attention_mask is None:
        return torch.ones(1, 1, 1, T, dtype=torch.bool, device=device)
    return attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
