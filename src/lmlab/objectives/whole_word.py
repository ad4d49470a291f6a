"""Whole-word masking: masked LM where a word is chosen or left whole, never split.

WordPiece cuts a rare word into a first piece and "##" continuation pieces ("un ##believ ##able").
Masking one piece of it leaves the others as a strong hint; masking whole words makes the task
harder and the representations better (the whole-word-masking BERT models). Words are taken in a
random order while they fit a budget of 15% of the eligible tokens (the first word that would
overshoot it ends the choice), then every chosen token gets BERT's 80/10/10 (`masked_lm.corrupt`).
"""

import torch

from lmlab.objectives.masked_lm import corrupt
from lmlab.objectives.masking_row import word_masking_objective
from lmlab.objectives.objective import Objective


def word_ids(continuation: torch.Tensor) -> torch.Tensor:
    """continuation (B, T) bool -> (B, T) the index of the word each token belongs to (0, 1, …
    per row): a token starts a new word unless it is a continuation piece."""
    return torch.cumsum((~continuation).long(), dim=1) - 1


def whole_word_chosen(special: torch.Tensor, continuation: torch.Tensor, generator: torch.Generator | None = None,
                      rate: float = 0.15) -> torch.Tensor:
    """(B, T) bool: whole words chosen in a random order while the chosen tokens stay within
    round(rate * eligible tokens) of each row. special (B, T) marks tokens never chosen."""
    B, T = special.shape
    words = word_ids(continuation)  # (B, T)
    score = torch.rand(special.shape, generator=generator, device=special.device)  # (B, T): a word's at its start
    score = torch.gather(score, 1, torch.where(~continuation, torch.arange(T, device=special.device), 0)
                         .cummax(dim=1).values)  # (B, T): every piece takes its word's start score
    score = score.masked_fill(special, float("inf"))  # never reached
    order = torch.sort(score, dim=1, stable=True).indices  # (B, T): words in random order, pieces together
    taken = torch.empty_like(words).scatter_(1, order, torch.arange(1, T + 1, device=special.device).expand(B, T))
    # tokens taken up to and including the end of each token's word, in that random order
    through_word = torch.zeros_like(words).scatter_reduce(1, words, taken, reduce="amax")  # (B, n_words<=T)
    through_word = torch.gather(through_word, 1, words)  # (B, T)
    budget = torch.round(rate * (~special).sum(dim=1, keepdim=True)).clamp(min=1)  # (B, 1)
    return (through_word <= budget) & ~special


def whole_word_masked_lm(ids: torch.Tensor, special: torch.Tensor, continuation: torch.Tensor, mask_id: int,
                         vocab_size: int, generator: torch.Generator | None = None,
                         rate: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked LM over whole words: ids, special, continuation (B, T) -> (inputs, targets) as `masked_lm`."""
    chosen = whole_word_chosen(special, continuation, generator, rate)
    return corrupt(ids, chosen, mask_id, vocab_size, generator)


def whole_word_objective(tokenizer) -> Objective:
    """`whole_word_masked_lm` bound to a WordPiece tokenizer: objective(row, key) -> (inputs, targets)."""
    return word_masking_objective(tokenizer, whole_word_masked_lm)
