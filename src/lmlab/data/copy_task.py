"""A long-range synthetic task: copy a random string, half a sequence later.

A sequence of `length` tokens is n = length / 2 random symbols, a separator, and the same n
symbols again (the last one cut off by the shift to next-token targets):

    x_1 … x_n  SEP  x_1 … x_(n-1)        inputs
    (ignored)       x_1 … x_n            targets

Only the copy is scored. To predict x_i the model must find the i-th symbol n + 1 tokens back:
content-based retrieval over half the sequence, which full attention learns in a hundred or so
steps (a previous-token head and an induction head, two layers) and a sliding window shorter than
n cannot do at all. The strings are uniformly random, so nothing but the copy can be learned and
chance is 1 / symbols. A batch is a pure function of (seed, step), like every lmlab batch.
"""

import numpy as np
import torch

from lmlab.errors import LmlabError
from lmlab.targets import IGNORE_INDEX


def copy_batch(batch_size: int, length: int, symbols: int, seed: int, step: int,
               held_out: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets), each (batch_size, length), of step `step` (or held-out batch `step`: strings
    no training step draws). Symbols are ids 0..symbols-1 and the separator is id `symbols` (a
    vocabulary of symbols + 1)."""
    if length < 4 or length % 2:
        raise LmlabError(f"a copy-task sequence of {length} tokens: use an even length of at least 4")
    n = length // 2
    generator = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, step, held_out]).generate_state(1)[0]))
    strings = torch.randint(0, symbols, (batch_size, n), generator=generator)  # (B, n)
    separator = torch.full((batch_size, 1), symbols)
    sequences = torch.cat([strings, separator, strings], dim=1)  # (B, 2n + 1)
    inputs, targets = sequences[:, :-1], sequences[:, 1:].clone()  # (B, length) each
    targets[:, :n] = IGNORE_INDEX  # the random string and the separator cannot be predicted
    return inputs, targets


def copy_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[int, int]:
    """(right, scored): how many copied symbols the greedy prediction of `logits` (B, T, V) gets right."""
    scored = targets != IGNORE_INDEX
    right = (logits.argmax(dim=-1) == targets) & scored
    return int(right.sum()), int(scored.sum())
