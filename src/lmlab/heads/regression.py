"""Regression on a BERT encoder: one real number per text or pair (e.g. STS-B similarity, 0 to 5).

The sequence classifier with a single output, trained with the mean squared error instead of
cross-entropy; HF's BertForSequenceClassification does the same when num_labels is 1.
"""

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.heads.sequence_classification import SequenceClassifier


class SequenceRegressor(SequenceClassifier):
    """(B, T) ids -> one score per sequence (B,)."""

    def __init__(self, encoder: nn.Module, dropout: float = 0.1):
        super().__init__(encoder, 1, dropout)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(input_ids, attention_mask, token_type_ids).squeeze(-1)  # (B,)


def regression_loss(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean squared error between predicted scores (B,) and targets (B,)."""
    return F.mse_loss(scores, targets.to(scores.dtype))
