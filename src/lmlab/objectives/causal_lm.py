"""Causal language modelling as a transformation of documents: predict each token from its prefix.

A packed block of T+1 tokens becomes inputs = tokens[:-1] and targets = tokens[1:]; positions
marked as padding become the ignore index so they add nothing to the loss.
"""

import torch

from lmlab.targets import IGNORE_INDEX


def causal_lm(block: torch.Tensor, padding_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """block (B, T+1) -> inputs (B, T), targets (B, T); padding_mask (B, T+1), 1 = real token."""
    inputs, targets = block[:, :-1], block[:, 1:].clone()
    if padding_mask is not None:
        targets[padding_mask[:, 1:] == 0] = IGNORE_INDEX
    return inputs, targets
