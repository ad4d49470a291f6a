"""Sequence classification on a BERT encoder: one label per text, or per pair of texts.

BERT reads a whole input through its [CLS] position: the pooler's tanh(W h_[CLS] + b) is fed
(after dropout) to a linear layer with one output per label, and the logits are trained with
cross-entropy (Devlin et al. 2018, figure 4). A sentence pair (entailment, paraphrase) is the
same head fed "[CLS] A [SEP] B [SEP]" with token types 0 for A and 1 for B.
"""

import torch
import torch.nn.functional as F
from torch import nn



class SequenceClassifier(nn.Module):
    """An encoder with a pooler, plus dropout and Linear(d_model, n_labels): (B, T) ids -> logits (B, n_labels)."""

    def __init__(self, encoder: nn.Module, n_labels: int, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.d_model, n_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        pooled = self.encoder.pooled(input_ids, attention_mask, token_type_ids)  # (B, C)
        return self.classifier(self.dropout(pooled))  # (B, n_labels)


def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits (B, n_labels) against label ids (B,)."""
    return F.cross_entropy(logits, labels)
