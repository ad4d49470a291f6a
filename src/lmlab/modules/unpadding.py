"""Unpadding: run an encoder on the real tokens of a padded batch only.

A batch of sentences of mixed length is padded to its longest one, and often most of it is
padding. Everything in a block except attention works token by token (projections, feed-forward,
norms, dropout), so it runs on the real tokens packed into one (N, C) tensor and skips the
padding. Attention needs the sequences apart: `UnpaddedSelfAttention` gives each sequence its
own unmasked attention over its own tokens, so no score is spent on padding either.

A row's real tokens are consecutive in the packed tensor (they keep their order), so a sequence
is a slice of it. Rows of the same length are attended together; a batch without padding is one
such group, packed by a reshape (a view, no copy). A score bias that depends on relative positions
only (T5's) is the same for every sequence, cut to its length; it rides along in the layout.
"""

from dataclasses import dataclass, replace
from functools import cached_property
from itertools import groupby

import torch
from torch import nn

from lmlab.modules.attention import SelfAttention, attend


@dataclass(frozen=True)
class Unpadding:
    """Where the N real tokens of a (B, T) batch sit: `pack` (B, T, ...) -> (N, ...), `unpack` back.

    indices: (N,) flat positions b * T + t of the real tokens, or None when every token is real;
    lengths: each row's number of real tokens (B,); score_bias: (1, H, T, T) added to every
    sequence's attention scores, its top-left (L, L) for a sequence of length L, or None. That cut
    is exact for a bias of relative positions when each row's real tokens are one run (left or
    right padding).
    """

    batch: int
    length: int
    indices: torch.Tensor | None
    lengths: tuple[int, ...]
    score_bias: torch.Tensor | None = None

    @classmethod
    def of(cls, attention_mask: torch.Tensor | None, batch: int, length: int) -> "Unpadding":
        """The layout of a batch (B, T) whose attention_mask (B, T) has 1 at real tokens (None: all real)."""
        if attention_mask is None or bool(attention_mask.all()):
            return cls(batch, length, None, (length,) * batch)
        real = attention_mask.bool()  # (B, T)
        return cls(batch, length, real.flatten().nonzero().squeeze(1), tuple(real.sum(1).tolist()))

    def with_score_bias(self, bias: torch.Tensor) -> "Unpadding":
        """This layout with `score_bias` (1, H, T, T) for every sequence's attention."""
        return replace(self, score_bias=bias)

    @cached_property
    def padded_score_mask(self) -> torch.Tensor:
        """`score_bias` (1, H, T, T) with -inf at each row's padded keys: (B, H, T, T), the mask of an
        attention call over the padded layout. Built once per layout, for every layer."""
        keys = torch.zeros(self.batch * self.length, dtype=torch.bool, device=self.score_bias.device)
        keys = keys.index_fill_(0, self.indices, True).view(self.batch, 1, 1, self.length)  # the real keys
        return self.score_bias.masked_fill(~keys, float("-inf"))

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, ...) -> its real tokens (N, ...)."""
        flat = x.flatten(0, 1)  # (B*T, ...)
        return flat if self.indices is None else flat.index_select(0, self.indices)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, ...) -> (B, T, ...), with zeros at the padding."""
        if self.indices is not None:
            x = x.new_zeros(self.batch * self.length, *x.shape[1:]).index_copy(0, self.indices, x)  # (B*T, ...)
        return x.view(self.batch, self.length, *x.shape[1:])

    def sequences(self, x: torch.Tensor) -> list[torch.Tensor]:
        """x (N, ...) as its sequences, consecutive rows of one length L together: [(rows, L, ...), …]."""
        groups, start = [], 0
        for L, run in groupby(self.lengths):
            rows = len(list(run))
            groups.append(x[start:start + rows * L].view(rows, L, *x.shape[1:]))
            start += rows * L
        return groups


class UnpaddedSelfAttention(SelfAttention):
    """Bidirectional multi-head self-attention over packed tokens: x (N, C) and an `Unpadding` -> (N, C).

    The weights and their names are `SelfAttention`'s; only the layout of the tokens differs.
    Each sequence attends over its own tokens, unmasked but for the layout's score bias. Keys and
    values have as many heads as queries (no grouped-query attention in these encoders). With
    `need_weights`, `weights` holds each group's attention map (rows, H, L, L), in order. With a
    score bias, attention runs over the padded layout in one call (`attend_padded`).
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0,
                 head_dim: int | None = None, scale: float | None = None, core: nn.Module | None = None):
        super().__init__(d_model, n_heads, bias=bias, dropout=dropout, head_dim=head_dim, scale=scale, core=core)

    def forward(self, x: torch.Tensor, layout: Unpadding, rope: None = None, kv_cache: None = None) -> torch.Tensor:
        """`rope` and `kv_cache` are what a block passes to any attention; an encoder has neither."""
        assert rope is None and kv_cache is None, "an unpadded encoder has no rotary positions and no KV cache"
        self.check_map_exists()
        qkv = self.qkv(x).view(x.size(0), 3 * self.n_heads, self.head_dim)  # (N, 3H, D)
        padded_with_bias = layout.score_bias is not None and layout.indices is not None
        if padded_with_bias and not self.need_weights and self.core is None:
            y = self.attend_padded(qkv, layout)
        else:
            y = self.attend_per_length(qkv, layout)
        return self.out(y.flatten(1))  # (N, H D) -> (N, C)

    def attend_per_length(self, qkv: torch.Tensor, layout: Unpadding) -> torch.Tensor:
        """qkv (N, 3H, D) -> (N, H, D): one attention call per group of sequences of one length."""
        outputs, maps = [], []
        for group in layout.sequences(qkv):  # (rows, L, 3H, D)
            q, k, v = group.transpose(1, 2).chunk(3, dim=1)  # (rows, H, L, D) each
            L = group.size(1)
            bias = None if layout.score_bias is None else layout.score_bias[:, :, :L, :L]  # (1, H, L, L)
            if self.core is not None:  # an efficient method: each sequence on its own, no padding to mask
                y, weights = self.core(q, k, v), None
            else:
                y, weights = attend(q, k, v, bias, dropout_p=self.dropout if self.training else 0.0,
                                    need_weights=self.need_weights, scale=self.scale)
            outputs.append(y.transpose(1, 2).flatten(0, 1))  # (rows * L, H, D)
            maps.append(weights)
        self.weights = maps if self.need_weights else None
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)  # (N, H, D)

    def attend_padded(self, qkv: torch.Tensor, layout: Unpadding) -> torch.Tensor:
        """qkv (N, 3H, D) -> (N, H, D) through one attention call over the padded (B, T) layout.

        A learned score bias (T5's) needs its gradient, which only SDPA's unfused path gives; one
        batched call of that path costs less than one per length, though it scores the padding.
        """
        q, k, v = layout.unpack(qkv).transpose(1, 2).chunk(3, dim=1)  # (B, H, T, D) each, zeros at padding
        y, self.weights = attend(q, k, v, layout.padded_score_mask, dropout_p=self.dropout if self.training else 0.0,
                                 scale=self.scale)
        return layout.pack(y.transpose(1, 2))  # (B, T, H, D) -> (N, H, D)
