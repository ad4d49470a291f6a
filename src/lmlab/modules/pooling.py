"""Pooling: one vector per sequence from its hidden states (B, T, C) -> (B, C).

`ClsPooler` is BERT's: a dense layer + tanh over the first ([CLS]) position, trained by the
next-sentence objective; `ContextPooler` is DeBERTa's, the same with GELU. `mean_pooled_embedding` is what sentence-embedding models (Sentence-BERT,
MiniLM) use: the mean over real tokens, L2-normalised so a dot product is a cosine.
"""

import torch
import torch.nn.functional as F
from torch import nn


class ClsPooler(nn.Module):
    """tanh(W h_[CLS] + b): the hidden state of the first token, projected."""

    def __init__(self, d_model: int):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, C) -> (B, C)."""
        return torch.tanh(self.proj(hidden[:, 0]))


class ContextPooler(ClsPooler):
    """gelu(W h_[CLS] + b): DeBERTa's pooler, added with its sequence-level heads."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, C) -> (B, C)."""
        return F.gelu(self.proj(hidden[:, 0]))


def mean_pooled_embedding(hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The mean of `hidden` (B, T, C) over real tokens (attention_mask (B, T), 1 = real), L2-normalised: (B, C)."""
    if attention_mask is None:
        mean = hidden.mean(dim=1)
    else:
        weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
        mean = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)  # (B, C)
    return F.normalize(mean, p=2, dim=-1)
