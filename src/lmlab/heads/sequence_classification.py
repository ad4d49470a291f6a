"""Sequence classification: one label per text, or per pair of texts.

BERT reads a whole input through its [CLS] position: the pooler's tanh(W h_[CLS] + b) is fed
(after dropout) to a linear layer with one output per label, and the logits are trained with
cross-entropy (Devlin et al. 2018, figure 4). A sentence pair (entailment, paraphrase) is the
same head fed "[CLS] A [SEP] B [SEP]" with token types 0 for A and 1 for B. The head sees only
the pooled vector; `heads.task_model.EncoderWithHead` runs the encoder that makes it.
"""

import torch
from torch import nn


class SequenceClassifier(nn.Module):
    """Dropout and Linear(d_model, n_labels): pooled (B, d_model) -> logits (B, n_labels)."""

    reads = "pooled"  # what EncoderWithHead feeds it: the encoder's pooled [CLS] vector

    def __init__(self, d_model: int, n_labels: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, n_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(pooled))  # (B, n_labels)
