"""Multiple choice on a BERT encoder (SWAG): one score per (question, choice) pair, softmax over choices.

Each of the K choices is paired with the question as "[CLS] question [SEP] choice [SEP]" and
read through the pooler; Linear(d_model, 1) turns it into a score, and the K scores of a
question are the logits of a K-way classification trained with cross-entropy.
"""

import torch
from torch import nn



class MultipleChoice(nn.Module):
    """An encoder with a pooler, plus dropout and Linear(d_model, 1): (B, K, T) ids -> logits (B, K)."""

    def __init__(self, encoder: nn.Module, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.d_model, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        B, K, T = input_ids.shape
        flat = [None if t is None else t.reshape(B * K, T) for t in (input_ids, attention_mask, token_type_ids)]
        pooled = self.encoder.pooled(*flat)  # (B*K, C)
        return self.classifier(self.dropout(pooled)).view(B, K)  # (B, K)
