"""Prefix tuning (Li & Liang, 2021): P trained key/value positions in front of the text, per layer.

Every layer's attention gets P extra keys and values (n_kv_heads, P, head_dim) that no token
produced; every query, at every position, may attend to them. Mechanically a prefix is a KV
cache that was filled before the text began, so the layer is the frozen attention called with
(a) a mask widened by P columns that are all visible and (b) a stand-in for its KV cache that
stores the text's keys/values as usual and hands them back with the prefix in front. The real
cache holds only the text, so positions, padding and cached decoding work as without a prefix.

Following the paper's advice, the prefix starts as the keys/values the model itself computes
for P random vocabulary tokens (a random start trains worse). The paper's MLP
reparameterisation is left out: the prefix is trained directly.
"""

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.modules.kv_cache import KVCache, LayerKV
from lmlab.modules.peft.core import PeftModule, freeze_base


def attend_with_prefix(attention: nn.Module, x: torch.Tensor, mask: torch.Tensor | None, rope,
                       kv_cache: LayerKV | None, prefix_k: torch.Tensor, prefix_v: torch.Tensor) -> torch.Tensor:
    """Self-attention `attention`(x, mask, rope, kv_cache) with prefix keys/values (H_kv, P, D) in
    front of the text's. mask is the decoder's bool (B or 1, 1, T, S) mask, or None."""
    T, P = x.size(1), prefix_k.size(1)
    if mask is None and T > 1:  # a full causal pass (S == T); one new token (T == 1) sees every key anyway
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()[None, None]  # (1, 1, T, T)
    if mask is not None:
        mask = torch.cat([mask.new_ones(*mask.shape[:-1], P), mask], dim=-1)  # (B or 1, 1, T, P + S)
    return attention(x, mask, rope, _PrefixedKV(kv_cache, prefix_k, prefix_v))


class _PrefixedKV:
    """Stands in for one layer's KV cache: new keys/values go to the real cache (if any) and come
    back, with everything cached before them, behind the prefix."""

    def __init__(self, kv_cache: LayerKV | None, prefix_k: torch.Tensor, prefix_v: torch.Tensor):
        self.kv_cache, self.prefix_k, self.prefix_v = kv_cache, prefix_k, prefix_v

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (B, H_kv, T, D) -> (B, H_kv, P + S, D)."""
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(k, v)  # (B, H_kv, S, D)
        B = k.size(0)
        prefix_k = self.prefix_k.to(k.dtype)[None].expand(B, -1, -1, -1)  # (B, H_kv, P, D)
        prefix_v = self.prefix_v.to(v.dtype)[None].expand(B, -1, -1, -1)
        return torch.cat([prefix_k, k], dim=2), torch.cat([prefix_v, v], dim=2)


class PrefixAttention(PeftModule):
    """A layer's self-attention (frozen) that also attends to P trained key/value positions."""

    adds = ("prefix_k", "prefix_v")

    def __init__(self, base: nn.Module, prefix_k: torch.Tensor, prefix_v: torch.Tensor):
        super().__init__()
        self.base = base
        self.prefix_k = nn.Parameter(prefix_k)  # (H_kv, P, D)
        self.prefix_v = nn.Parameter(prefix_v)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rope=None,
                kv_cache: LayerKV | None = None) -> torch.Tensor:
        if self.disabled:
            return self.base(x, mask, rope, kv_cache)
        return attend_with_prefix(self.base, x, mask, rope, kv_cache, self.prefix_k, self.prefix_v)


def apply_prefix(model: nn.Module, n_prefix: int = 16) -> nn.Module:
    """Give every layer's attention `n_prefix` trained key/value positions; freeze everything else.
    Returns `model` (changed in place)."""
    cfg = model.config
    if not 1 <= n_prefix <= cfg.context_length:
        raise LmlabError(f"--n-prefix {n_prefix} must be between 1 and the context length ({cfg.context_length})")
    weight = next(model.parameters())
    ids = torch.randint(cfg.vocab_size, (1, n_prefix), device=weight.device)
    cache = KVCache(cfg.n_layers, 1, cfg.n_kv_heads or cfg.n_heads, cfg.head_dim, n_prefix, weight.dtype, weight.device)
    training = model.training
    with torch.no_grad():
        model.eval().hidden_states(ids, kv_cache=cache)
    model.train(training)
    for i, block in enumerate(model.blocks):
        block.attention = PrefixAttention(block.attention, cache.k[i][0].clone(), cache.v[i][0].clone())
    freeze_base(model)
    return model
