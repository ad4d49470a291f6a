"""Regression: one real number per text or pair (e.g. STS-B similarity, 0 to 5).

The sequence classifier with a single output, trained with the mean squared error instead of
cross-entropy; HF's BertForSequenceClassification does the same when num_labels is 1.
"""

import torch

from lmlab.heads.sequence_classification import SequenceClassifier


class SequenceRegressor(SequenceClassifier):
    """pooled (B, d_model) -> one score per sequence (B,)."""

    def __init__(self, d_model: int, dropout: float = 0.1):
        super().__init__(d_model, 1, dropout)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return super().forward(pooled).squeeze(-1)  # (B,)
