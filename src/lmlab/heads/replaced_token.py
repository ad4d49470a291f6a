"""ELECTRA's replaced-token-detection head: for every token, was it replaced by the generator?

A two-layer MLP per position, gelu(W h + b) then a projection to one logit; sigmoid(logit) is the
probability that the token is not the original. Every token is a training example (not just the
15% that were masked), which is why ELECTRA learns more per step than masked LM.
"""

import torch
import torch.nn.functional as F
from torch import nn


class ReplacedTokenHead(nn.Module):
    """hidden (…, d_model) -> logits (…): > 0 means "replaced"."""

    def __init__(self, d_model: int, approximate: str = "none"):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, 1)
        self.approximate = approximate

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.dense(hidden), approximate=self.approximate)).squeeze(-1)
