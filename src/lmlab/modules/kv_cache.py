"""The key/value cache that makes decoding one token at a time cost O(T) instead of O(T^2).

Buffers are preallocated for `max_len` positions; each forward pass writes its new keys and
values at `length` and the model then advances `length`. Beam search reorders the batch.
"""

import torch


class KVCache:
    """Keys and values of every layer for positions [0, length)."""

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        shape = (batch_size, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.max_len = max_len
        self.length = 0

    def layer(self, i: int) -> "LayerKV":
        """The view that layer `i`'s attention writes to and reads from."""
        return LayerKV(self, i)

    def advance(self, n: int) -> None:
        """Mark `n` more positions as filled (called once per forward pass, after every layer)."""
        self.length += n

    def reorder(self, batch_indices: torch.Tensor) -> None:
        """Keep rows `batch_indices` of the batch (beam search picks which hypotheses survive)."""
        self.k = [k.index_select(0, batch_indices) for k in self.k]
        self.v = [v.index_select(0, batch_indices) for v in self.v]


class LayerKV:
    """One layer's slice of a `KVCache`."""

    def __init__(self, cache: KVCache, layer: int):
        self.cache, self.layer = cache, layer

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, H_kv, T, D) after the cached positions; return all of them (B, H_kv, S, D)."""
        c, start = self.cache, self.cache.length
        end = start + k.size(2)
        if end > c.max_len:
            raise ValueError(f"KV cache holds {c.max_len} positions; {end} were needed")
        c.k[self.layer][:, :, start:end] = k
        c.v[self.layer][:, :, start:end] = v
        return c.k[self.layer][:, :, :end], c.v[self.layer][:, :, :end]
