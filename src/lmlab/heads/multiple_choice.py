"""Multiple choice (SWAG): one score per (question, choice) pair, softmax over choices.

Each of the K choices is paired with the question as "[CLS] question [SEP] choice [SEP]" and
read through the pooler; Linear(d_model, 1) turns it into a score, and the K scores of a
question are the logits of a K-way classification trained with cross-entropy. The head scores
one pair at a time; `heads.task_model.EncoderWithHead` flattens (B, K, T) inputs to B*K pairs
and gives the scores back as (B, K).
"""

import torch
from torch import nn


class MultipleChoice(nn.Module):
    """Dropout and Linear(d_model, 1): pooled (N, d_model), one row per (question, choice) -> scores (N,)."""

    reads = "pooled"  # what EncoderWithHead feeds it: the encoder's pooled [CLS] vector

    def __init__(self, d_model: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, 1)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(pooled)).squeeze(-1)  # (N,)
