"""Causal language modelling as a transformation of documents: predict each token from its prefix.

A packed block of T+1 tokens becomes inputs = tokens[:-1] and targets = tokens[1:]; positions
marked as padding become the ignore index so they add nothing to the loss.
"""

import torch

from lmlab.objectives.objective import Key, Objective, Tokens
from lmlab.targets import IGNORE_INDEX


def causal_lm(block: torch.Tensor, padding_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """block (B, T+1) -> inputs (B, T), targets (B, T); padding_mask (B, T+1), 1 = real token."""
    inputs, targets = block[:, :-1], block[:, 1:].clone()
    if padding_mask is not None:
        targets[padding_mask[:, 1:] == 0] = IGNORE_INDEX
    return inputs, targets


def causal_lm_objective(tokenizer=None) -> Objective:
    """`causal_lm` on one example: objective(tokens (T+1), key) -> (tokens[:-1], tokens[1:]); it needs
    no special token and draws nothing, so tokenizer and key are not read. Batched recipes call
    `causal_lm` on the whole (B, T+1) block instead, the same transformation on every row."""
    def objective(tokens: Tokens, key: Key) -> tuple[Tokens, Tokens]:
        return list(tokens[:-1]), list(tokens[1:])
    return objective
