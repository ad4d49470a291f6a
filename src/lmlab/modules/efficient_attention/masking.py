"""Attention under an explicit (T, S) pattern: what every efficient method falls back to where a dense mask is
cheap (decoding a few tokens from a cache) and what the tests compare the fast paths with."""

import math

import torch


def masked_softmax_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                          key_padding: torch.Tensor | None = None, query_start: int | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v over the keys `allowed` (T, S) bool lets each query see, minus padded keys
    (`key_padding` (B, S), True at real tokens). The queries sit at positions query_start.. (default: the
    last T of S), and each may always see itself, so a padded query's row is never empty.
    q (B, H, T, D); k, v (B, H, S, D) -> (B, H, T, D)."""
    T, S = q.size(2), k.size(2)
    start = S - T if query_start is None else query_start
    itself = torch.arange(start, start + T, device=q.device)[:, None] == torch.arange(S, device=q.device)
    mask = allowed[None, None]  # (1, 1, T, S)
    if key_padding is not None:
        mask = mask & key_padding[:, None, None, :].bool()
    mask = mask | itself
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, T, S)
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
