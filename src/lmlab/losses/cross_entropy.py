"""Token-level cross-entropy, the loss of every language-modelling objective."""

import torch
import torch.nn.functional as F

from lmlab.objectives.causal_lm import IGNORE_INDEX


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean (or summed) -log p(target) over positions whose target is not IGNORE_INDEX.

    logits (B, T, V) in any dtype (computed in fp32); targets (B, T) int.
    """
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                           reduction=reduction)
