"""Unpadding: run an encoder's per-token layers on the real tokens of a padded batch only.

A batch of sentences of mixed length is padded to its longest one, and often most of it is
padding. Everything in a block except attention works token by token (projections, feed-forward,
norms, dropout), so it can run on the real tokens packed into one (N, C) tensor and skip the
padding. Attention still needs each sequence on its own: `UnpaddedSelfAttention` scatters its
q, k, v back to (B, T, ...) for one masked SDPA call and packs the result again.

A batch without padding is packed by a reshape (a view, no copy), and attention runs unmasked.
"""

from dataclasses import dataclass

import torch

from lmlab.modules.attention import SelfAttention, attend


@dataclass(frozen=True)
class Unpadding:
    """Where the N real tokens of a (B, T) batch sit: `pack` (B, T, ...) -> (N, ...), `unpack` back.

    indices: (N,) flat positions b * T + t of the real tokens, or None when every token is real;
    mask: the key mask (B, 1, 1, T) for attention over the unpacked batch, or None (no padding).
    """

    batch: int
    length: int
    indices: torch.Tensor | None
    mask: torch.Tensor | None

    @classmethod
    def of(cls, attention_mask: torch.Tensor | None, batch: int, length: int) -> "Unpadding":
        """The layout of a batch (B, T) whose attention_mask (B, T) has 1 at real tokens (None: all real)."""
        if attention_mask is None or bool(attention_mask.all()):
            return cls(batch, length, None, None)
        real = attention_mask.bool()  # (B, T)
        return cls(batch, length, real.flatten().nonzero().squeeze(1), real[:, None, None, :])

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, ...) -> its real tokens (N, ...)."""
        flat = x.flatten(0, 1)  # (B*T, ...)
        return flat if self.indices is None else flat.index_select(0, self.indices)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, ...) -> (B, T, ...), with zeros at the padding."""
        if self.indices is not None:
            x = x.new_zeros(self.batch * self.length, *x.shape[1:]).index_copy(0, self.indices, x)  # (B*T, ...)
        return x.view(self.batch, self.length, *x.shape[1:])


class UnpaddedSelfAttention(SelfAttention):
    """Bidirectional multi-head self-attention over packed tokens: x (N, C) and an `Unpadding` -> (N, C).

    The weights and their names are `SelfAttention`'s; only the layout of the tokens differs.
    The projections see the N real tokens; the attention itself runs per sequence, padded.
    Keys and values have as many heads as queries (no grouped-query attention in these encoders).
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__(d_model, n_heads, bias=bias, dropout=dropout)

    def forward(self, x: torch.Tensor, layout: Unpadding, rope: None = None, kv_cache: None = None) -> torch.Tensor:
        """`rope` and `kv_cache` are what a block passes to any attention; an encoder has neither."""
        assert rope is None and kv_cache is None, "an unpadded encoder has no rotary positions and no KV cache"
        qkv = layout.unpack(self.qkv(x))  # (N, 3 H D) -> (B, T, 3 H D)
        B, T, _ = qkv.shape
        q, k, v = qkv.view(B, T, 3 * self.n_heads, self.head_dim).transpose(1, 2).chunk(3, dim=1)  # (B, H, T, D)
        y, self.weights = attend(q, k, v, layout.mask, dropout_p=self.dropout if self.training else 0.0,
                                 need_weights=self.need_weights, scale=self.scale)
        return self.out(layout.pack(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)))  # (N, C)
