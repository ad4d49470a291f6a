"""Relative positions in buckets: T5's bias, and DeBERTa's relative position embeddings.

T5 learns a scalar per head and per *bucket* of key - query offset, added to the attention scores
(so positions enter attention, never the embeddings).

Offsets below `n_buckets / 2` (per direction) get a bucket each; larger ones share log-spaced
buckets up to `max_distance`, beyond which they all fall in the last bucket. The encoder is
bidirectional (half the buckets for keys to the left, half for the right); the decoder sees only
the past, so every bucket serves leftward offsets. One table serves every layer of a stack.

DeBERTa learns a *vector* per bucket of query - key distance (`RelativeEmbeddings`), which each
layer's disentangled attention projects into position keys and queries
(`modules.disentangled_attention`). Its buckets are exact up to half their count per side and
log-spaced beyond, up to `max_distance` (`log_buckets`).
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


def log_buckets(offsets: torch.Tensor, n_buckets: int, max_distance: int) -> torch.Tensor:
    """DeBERTa's bucket of each offset (long, same shape), signed: offsets within n_buckets / 2 of 0 keep
    their value; farther ones map to mid + ceil(log(|offset| / mid) / log((max_distance - 1) / mid) * (mid - 1))
    with their sign, mid = n_buckets / 2, so the buckets grow log-wide out to max_distance."""
    mid = n_buckets // 2
    distance = offsets.abs()
    far = torch.where(distance < mid, mid - 1, distance)  # near offsets: a harmless value, not used
    # the same float32 steps as the reference implementation, so the rounding up lands on the same buckets
    scaled = torch.log(far / mid) / torch.log(torch.tensor((max_distance - 1) / mid)) * (mid - 1)
    logged = (torch.ceil(scaled) + mid) * torch.sign(offsets)
    return torch.where(distance <= mid, offsets.float(), logged).long()


class RelativeEmbeddings(nn.Module):
    """DeBERTa's table of relative position vectors, one per bucket of query - key offset, shared by
    every layer: `span` buckets on each side, so 2 * span rows (d_model wide), optionally layer-normed.

    Called with a length T it gives the rows and, for every query i and key j, the row that their
    offset reads: index[i, j] = clamp(bucket(i - j) + span, 0, 2 * span - 1), cut to the rows used.
    """

    def __init__(self, d_model: int, span: int, max_distance: int, log_bucketed: bool, norm: nn.Module | None):
        super().__init__()
        self.table = nn.Embedding(2 * span, d_model)
        self.norm = norm  # None: the rows as stored ("none"); a LayerNorm ("layer_norm", DeBERTa-v3)
        self.span, self.max_distance, self.log_bucketed = span, max_distance, log_bucketed

    def forward(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows (R, d_model), index (T, T) long into them): only the R rows some offset of T positions reads."""
        positions = torch.arange(T, device=self.table.weight.device)
        offsets = positions[:, None] - positions[None, :]  # (T, T): query - key
        if self.log_bucketed:
            offsets = log_buckets(offsets, self.span, self.max_distance)
        index = (offsets + self.span).clamp(0, 2 * self.span - 1)  # (T, T)
        first, last = int(index.min()), int(index.max())
        rows = self.table.weight[first:last + 1]  # (R, C): a short text reads few of the 2 * span rows
        if self.norm is not None:
            rows = self.norm(rows)
        return rows, index - first
