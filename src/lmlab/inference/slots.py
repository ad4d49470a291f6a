"""The serving engine's KV cache: one row ("slot") per running request, each at its own length.

A `KVCache` (modules/kv_cache.py) holds a batch whose rows all advance together. Requests in a
server arrive and leave at any step, with prompts of any length, so here each row keeps its own
length and the running requests always fill rows 0..B-1: a request that ends hands its row to the
last one (one row copied), so a decoding step reads the first B rows as plain views, no gather.

Rows grow on demand: the buffers start short and double (up to `max_len`) when a request needs
more room, so memory follows the longest running request instead of slots x the model's context.
A model whose every layer attends over a sliding window stops growing at two windows: a full row then
keeps the newest keys its window reads (`make_room`), and its positions run on past its columns.

Two views drive the model (`TransformerDecoder.run_stack` reads them like a `KVCache`):
`RowKV` fills one row from a position on (a prompt's prefill) and `StepKV` appends one token (or T:
speculative decoding's last token and drafts) to each of the first B rows at that row's own length
(a decoding step).
"""

import torch

from lmlab.modules.kv_cache import LayerKV, move_to_front

FIRST_CAPACITY = 256  # positions per row before the first growth


class SlotCache:
    """Keys and values (slots, H_kv, capacity, D) per layer, and each row's filled length."""

    def __init__(self, n_layers: int, slots: int, n_kv_heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 window: int | None = None):
        self.shape = (slots, n_kv_heads, min(FIRST_CAPACITY, max_len), head_dim)
        self.k = [torch.zeros(self.shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(self.shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.max_len = max_len
        self.lengths = [0] * slots  # filled columns of each row
        self.offsets = [0] * slots  # positions a row dropped from its front: its column c holds position offset + c
        self.window = window  # every layer's sliding window, or None

    @property
    def capacity(self) -> int:
        return self.k[0].size(2)

    def reserve(self, length: int) -> None:
        """Make room for `length` positions in every row (doubling, at most `max_len`)."""
        if length <= self.capacity:
            return
        if length > self.max_len:
            raise ValueError(f"a row needs {length} positions; the cache holds at most {self.max_len}")
        grown = min(self.max_len, max(length, 2 * self.capacity))
        for buffers in (self.k, self.v):
            for i, old in enumerate(buffers):
                new = old.new_zeros(old.size(0), old.size(1), grown, old.size(3))
                new[:, :, :old.size(2)] = old
                buffers[i] = new

    def make_room(self, rows: int, tokens: int = 1) -> None:
        """Room for `tokens` more positions in each of the first `rows` rows: the buffers grow, except that with
        a window, once they hold two windows, a full row keeps its newest window - 1 keys instead (one token a
        step: speculative decoding, which cuts rows back, is refused for windowed models)."""
        for row in range(rows):
            n = self.lengths[row]
            if self.window is not None and n + tokens > self.capacity >= 2 * self.window:
                keep = self.window - 1
                move_to_front(self.k + self.v, row, n - keep, n)
                self.lengths[row], self.offsets[row] = keep, self.offsets[row] + n - keep
        self.reserve(max(self.lengths[:rows]) + tokens)

    def clear(self, row: int) -> None:
        """Empty `row` for a new request."""
        self.lengths[row] = self.offsets[row] = 0

    def positions(self, rows: int) -> list[int]:
        """The position of the next token of each of the first `rows` rows."""
        return [offset + n for offset, n in zip(self.offsets[:rows], self.lengths[:rows])]

    def move(self, source: int, target: int) -> None:
        """Copy row `source`'s keys, values, length and offset into row `target` (compacting the running rows)."""
        n = self.lengths[source]
        for buffers in (self.k, self.v):
            for layer in buffers:
                layer[target, :, :n] = layer[source, :, :n]
        self.lengths[target], self.offsets[target] = n, self.offsets[source]

    def write_prefix(self, row: int, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Put a stored prefix (per layer (H_kv, n, D)) at the start of `row`; its length becomes n."""
        n = keys[0].size(1)
        self.reserve(n)
        for layer, k in zip(self.k, keys):
            layer[row, :, :n] = k
        for layer, v in zip(self.v, values):
            layer[row, :, :n] = v
        self.lengths[row], self.offsets[row] = n, 0

    def read_prefix(self, row: int, n: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of the first `n` positions of `row`, per layer (H_kv, n, D), for the prefix cache."""
        return ([layer[row, :, :n].clone() for layer in self.k], [layer[row, :, :n].clone() for layer in self.v])

    def row_view(self, row: int) -> "RowKV":
        return RowKV(self, row)

    def step_view(self, rows: int, tokens: int = 1) -> "StepKV":
        return StepKV(self, rows, tokens)


class RowKV:
    """One row as a batch-of-one cache, filled from its current length on (a prompt's prefill)."""

    def __init__(self, cache: SlotCache, row: int):
        self.cache, self.row = cache, row

    @property
    def length(self) -> int:
        return self.cache.lengths[self.row]

    def layer(self, i: int) -> LayerKV:
        r = self.row
        return LayerKV(self.cache.k[i][r:r + 1], self.cache.v[i][r:r + 1], self.length)

    def advance(self, n: int) -> None:
        self.cache.lengths[self.row] += n


class StepKV:
    """The first `rows` rows, each taking `tokens` new tokens (T) at its own length (a decoding step: one token;
    a speculative step: the last token and the drafts, `inference.speculation`).

    The model reads keys up to the longest row; `mask` hides, in each row, the positions past each of
    its own new tokens (its later tokens, stale values of an earlier request, or zeros).
    """

    def __init__(self, cache: SlotCache, rows: int, tokens: int = 1):
        self.cache, self.rows, self.tokens = cache, rows, tokens
        device = cache.k[0].device
        cache.make_room(rows, tokens)
        self.at = torch.tensor(cache.lengths[:rows], device=device)  # (B,) the column each first new token goes to
        self.end = max(cache.lengths[:rows]) + tokens  # keys read: S
        self.offset = torch.arange(tokens, device=device)  # (T,)
        self.position = torch.tensor(cache.positions(rows), device=device)  # (B,) its position
        self.batch = torch.arange(rows, device=device)

    @property
    def length(self) -> int:
        """Keys read before this step's tokens: the longest row's length (S - T)."""
        return self.end - self.tokens

    @property
    def positions(self) -> torch.Tensor:
        """(B, T): the position of each row's new tokens."""
        return self.position[:, None] + self.offset

    @property
    def mask(self) -> torch.Tensor | None:
        """(B, 1, T, S) bool: each row's token t sees its row's positions up to itself; None for one token a row
        when every row has the same length (it sees all S keys: attention's fast path without a mask)."""
        lengths = self.cache.lengths[:self.rows]
        if self.tokens == 1 and min(lengths) == max(lengths):
            return None
        keys = torch.arange(self.end, device=self.at.device)
        return (keys <= (self.at[:, None] + self.offset)[:, :, None])[:, None]  # (B, 1, T, S)

    def layer(self, i: int) -> "_StepLayer":
        return _StepLayer(self, self.cache.k[i], self.cache.v[i])

    def advance(self, n: int) -> None:
        for row in range(self.rows):
            self.cache.lengths[row] += n


class _StepLayer:
    """One layer of a `StepKV`: what a `SelfAttention` writes its new key and value to."""

    def __init__(self, step: StepKV, k: torch.Tensor, v: torch.Tensor):
        self.step, self.k, self.v = step, k, v

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, H_kv, T, D) at each row's own positions; return rows' keys and values (B, H_kv, S, D)."""
        step = self.step
        if step.tokens == 1:
            self.k[step.batch, :, step.at] = k[:, :, 0]  # (B, H_kv, D) into row b at position at[b]
            self.v[step.batch, :, step.at] = v[:, :, 0]
        else:
            columns = step.at[:, None] + step.offset  # (B, T)
            self.k[step.batch[:, None], :, columns] = k.transpose(1, 2)  # (B, T, H_kv, D) into row b at at[b] + t
            self.v[step.batch[:, None], :, columns] = v.transpose(1, 2)
        return self.k[:step.rows, :, :step.end], self.v[:step.rows, :, :step.end]
