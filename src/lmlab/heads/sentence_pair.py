"""The 2-way head on a sentence pair's pooled [CLS] vector: BERT's next-sentence prediction
(is B the sentence after A?) and ALBERT's sentence-order prediction (are A and B in order?)."""

import torch
from torch import nn


class SentencePairHead(nn.Module):
    """pooled (B, d_model) -> logits (B, 2); class 1 = "is next" (NSP) or "in order" (SOP)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.proj = nn.Linear(d_model, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.proj(pooled)
