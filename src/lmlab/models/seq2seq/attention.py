"""Attention for an RNN decoder over the encoder's states: four modules with one call signature.

    context, weights = attention(query (B, T, H), memory (B, S, M), mask (B, S))
    context (B, T, C): the weighted sum of memory rows; weights (B, T, S): softmax over S

Each module only defines the score e(s, h) of decoder state s against encoder state h:
    additive (Bahdanau)          v^T tanh(W s + U h)
    multiplicative (Luong)       s^T W h   ("general")
    dot (Luong)                  s^T h
    none                         no score: the decoder sees the source only through its initial
                                 state, the fixed-vector bottleneck attention was invented to remove.
Positions where `mask` is False (padding) get probability 0.
"""

import torch
from torch import nn


def attend(scores: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax of scores (B, T, S) over the unmasked source positions; returns (context (B, T, M), weights)."""
    weights = scores.masked_fill(~mask[:, None, :], float("-inf")).softmax(dim=-1)  # (B, T, S)
    return weights @ memory, weights  # (B, T, S) @ (B, S, M) -> (B, T, M)


class AdditiveAttention(nn.Module):
    """Bahdanau's score v^T tanh(W s + U h): a one-hidden-layer network over the pair."""

    def __init__(self, query_dim: int, memory_dim: int, attention_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)  # W
        self.memory_proj = nn.Linear(memory_dim, attention_dim, bias=True)  # U (and the layer's bias)
        self.v = nn.Linear(attention_dim, 1, bias=False)
        self.context_dim = memory_dim

    def forward(self, query, memory, mask):
        hidden = torch.tanh(self.query_proj(query)[:, :, None, :] + self.memory_proj(memory)[:, None, :, :])  # (B, T, S, A)
        return attend(self.v(hidden).squeeze(-1), memory, mask)  # scores (B, T, S)


class MultiplicativeAttention(nn.Module):
    """Luong's "general" score s^T W h: a bilinear form, one matrix product per step."""

    def __init__(self, query_dim: int, memory_dim: int):
        super().__init__()
        self.weight = nn.Linear(memory_dim, query_dim, bias=False)  # W h for every h
        self.context_dim = memory_dim

    def forward(self, query, memory, mask):
        scores = query @ self.weight(memory).transpose(1, 2)  # (B, T, H) @ (B, H, S) -> (B, T, S)
        return attend(scores, memory, mask)


class DotAttention(nn.Module):
    """Luong's "dot" score s^T h: no parameters; the decoder and encoder states share a size."""

    def __init__(self, query_dim: int, memory_dim: int):
        super().__init__()
        if query_dim != memory_dim:
            raise ValueError(f"dot attention needs equal sizes, got query {query_dim} and memory {memory_dim}")
        self.context_dim = memory_dim

    def forward(self, query, memory, mask):
        return attend(query @ memory.transpose(1, 2), memory, mask)  # scores (B, T, S)


class NoAttention(nn.Module):
    """No look at the source: an empty context (B, T, 0) and no weights (None)."""

    context_dim = 0

    def forward(self, query, memory, mask):
        return query.new_zeros(*query.shape[:2], 0), None


def build_attention(kind: str, hidden: int, attention_dim: int) -> nn.Module:
    """The attention module named `kind` (see ATTENTION_KINDS) for decoder and encoder states of size `hidden`."""
    if kind == "additive":
        return AdditiveAttention(hidden, hidden, attention_dim)
    if kind == "multiplicative":
        return MultiplicativeAttention(hidden, hidden)
    if kind == "dot":
        return DotAttention(hidden, hidden)
    return NoAttention()
