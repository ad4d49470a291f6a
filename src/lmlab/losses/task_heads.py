"""The losses of the task heads (`lmlab.heads`) that `lmlab finetune` trains: one per kind of output.

    classification  cross-entropy of logits (B, n_labels) against label ids (B,)   classify, pair, choice
    regression      mean squared error of scores (B,) against numbers (B,)          regress
    tagging         cross-entropy over the labelled tokens (B, T, n_tags)            tag (BIO, first sub-tokens)
    span            the mean of the start and end cross-entropies                    qa
"""

import torch
import torch.nn.functional as F

from lmlab.targets import IGNORE_INDEX


def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits (B, n_labels) against label ids (B,)."""
    return F.cross_entropy(logits, labels)


def regression_loss(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean squared error between predicted scores (B,) and targets (B,)."""
    return F.mse_loss(scores, targets.to(scores.dtype))


def tagging_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the labelled tokens: logits (B, T, n_tags), labels (B, T) with IGNORE_INDEX."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)


def span_loss(logits: tuple[torch.Tensor, torch.Tensor], positions: torch.Tensor) -> torch.Tensor:
    """The mean of the start and end cross-entropies: logits (start, end) (B, T) each, as
    `heads.span_extraction.SpanExtractor` returns them; positions (B, 2) the answer's first and last token."""
    start, end = logits
    return (F.cross_entropy(start, positions[:, 0]) + F.cross_entropy(end, positions[:, 1])) / 2
