"""The key/value cache that makes decoding one token at a time cost O(T) instead of O(T^2).

Buffers are preallocated for `max_len` positions; each forward pass writes its new keys and
values at `length` and the model then advances `length` (speculative decoding `truncate`s it back to the
tokens it kept). Beam search reorders the batch. A model
whose every layer attends over a sliding window needs only the newest keys: `keep_last` drops the
rest, so its cache stays about the window's size however long it decodes.
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
        self.length = 0  # filled columns
        self.offset = 0  # positions dropped from the front (`keep_last`): column c holds position offset + c

    def layer(self, i: int) -> "LayerKV":
        """The view that layer `i`'s attention writes to and reads from (until the next `advance`)."""
        return LayerKV(self.k[i], self.v[i], self.length)

    def advance(self, n: int) -> None:
        """Mark `n` more positions as filled (called once per forward pass, after every layer)."""
        self.length += n

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on (speculative decoding drops the draft tokens the model did
        not keep); the next pass writes over their columns."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        self.length = length

    def keep_last(self, n: int) -> None:
        """Keep only the newest `n` positions, moved to the front of the buffers (a model with a sliding window
        of n + 1 keys on every layer reads no older ones)."""
        drop = self.length - n
        if drop <= 0:
            return
        move_to_front(self.k + self.v, slice(None), drop, self.length)
        self.length, self.offset = n, self.offset + drop

    def reorder(self, batch_indices: torch.Tensor) -> None:
        """Keep rows `batch_indices` of the batch (beam search picks which hypotheses survive)."""
        self.k = [k.index_select(0, batch_indices) for k in self.k]
        self.v = [v.index_select(0, batch_indices) for v in self.v]


def move_to_front(buffers: list[torch.Tensor], rows: slice | int, start: int, end: int) -> None:
    """Move columns [start, end) of `rows` of every buffer (B, H_kv, S, D) to its front, for a cache that drops
    the keys no layer reads any more (`KVCache.keep_last`, the serving engine's slots); the regions may overlap."""
    for t in buffers:
        t[rows, :, :end - start] = t[rows, :, start:end].clone()


class LayerKV:
    """One layer's buffers (B, H_kv, max_len, D) and where this forward pass writes in them.

    It holds the tensors themselves, not the cache and a layer number, so that a compiled block
    (`generation/compiled.py`) sees the same kind of input at every layer and compiles once.
    """

    def __init__(self, k: torch.Tensor, v: torch.Tensor, start: int):
        self.k, self.v, self.start = k, v, start

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, H_kv, T, D) after the cached positions; return all of them (B, H_kv, S, D)."""
        end = self.start + k.size(2)
        if end > self.k.size(2):
            raise ValueError(f"KV cache holds {self.k.size(2)} positions; {end} were needed")
        self.k[:, :, self.start:end] = k
        self.v[:, :, self.start:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]
