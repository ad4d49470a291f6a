"""T5's relative position bias: a learned scalar per head and per *bucket* of key - query offset,
added to the attention scores (so positions enter attention, never the embeddings).

Offsets below `n_buckets / 2` (per direction) get a bucket each; larger ones share log-spaced
buckets up to `max_distance`, beyond which they all fall in the last bucket. The encoder is
bidirectional (half the buckets for keys to the left, half for the right); the decoder sees only
the past, so every bucket serves leftward offsets. One table serves every layer of a stack.
"""

import math

import torch
from torch import nn


def relative_buckets(offsets: torch.Tensor, bidirectional: bool, n_buckets: int, max_distance: int) -> torch.Tensor:
    """Bucket index (same shape, long) of each offset = key position - query position."""
    buckets = torch.zeros_like(offsets)
    if bidirectional:
        n_buckets //= 2
        buckets += (offsets > 0).long() * n_buckets  # keys to the right use the upper half
        distance = offsets.abs()
    else:
        distance = (-offsets).clamp(min=0)  # a causal decoder only looks left
    exact = n_buckets // 2
    log_scaled = exact + (
        torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (n_buckets - exact)
    ).long()
    log_scaled = log_scaled.clamp(max=n_buckets - 1)
    return buckets + torch.where(distance < exact, distance, log_scaled)


class RelativePositionBias(nn.Module):
    """bias[h, q, k] = table[bucket(k - q), h]: a (1, H, T, S) tensor to add to attention scores."""

    def __init__(self, n_heads: int, bidirectional: bool, n_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.table = nn.Embedding(n_buckets, n_heads)
        self.bidirectional, self.n_buckets, self.max_distance = bidirectional, n_buckets, max_distance

    def forward(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """query_positions (T,), key_positions (S,) -> bias (1, H, T, S)."""
        offsets = key_positions[None, :] - query_positions[:, None]  # (T, S)
        buckets = relative_buckets(offsets, self.bidirectional, self.n_buckets, self.max_distance)
        return self.table(buckets).permute(2, 0, 1)[None]  # (1, H, T, S)
