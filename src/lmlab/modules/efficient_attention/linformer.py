"""Linformer (Wang et al., 2020): keys and values projected along the sequence to `rank` rows, so attention
costs O(T rank) instead of O(T^2).

K' = E K and V' = F V with learned E, F of shape (rank, max_len), shared by the heads of a layer (their
"headwise" sharing); a sequence of T tokens uses the first T columns. Padded keys and values are zeroed
before the projection, which mixes positions, so a mask could no longer tell them apart. Every output
mixes every position: there is no causal form, and a causal model refuses it.
"""

import math

import torch
from torch import nn


class LinformerAttention(nn.Module):
    """q (B, H, T, D), k, v (B, H, T, D) -> (B, H, T, D) over `rank` projected keys and values."""

    def __init__(self, max_len: int, rank: int):
        super().__init__()
        self.E = nn.Parameter(torch.randn(rank, max_len) / math.sqrt(rank))
        self.F = nn.Parameter(torch.randn(rank, max_len) / math.sqrt(rank))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                key_padding: torch.Tensor | None = None) -> torch.Tensor:
        T = k.size(2)
        if key_padding is not None:
            keep = key_padding[:, None, :, None].to(k.dtype)  # (B, 1, T, 1)
            k, v = k * keep, v * keep
        keys, values = self.E[:, :T] @ k, self.F[:, :T] @ v  # (B, H, rank, D)
        scores = (q @ keys.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, T, rank)
        return scores.softmax(dim=-1) @ values
