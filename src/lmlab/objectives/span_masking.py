"""Span masking (SpanBERT): mask runs of whole words instead of scattered tokens.

Span lengths, counted in words, follow a geometric distribution p(l) ~ 0.2 (1 - 0.2)^(l - 1)
restricted to 1..10 (renormalised: a mean of about 3.8 words). A span starts at a random word not
yet masked and runs over the following words (never past a special token) until it has its length
or the row has masked 15% of its eligible tokens. Every masked token then gets BERT's 80/10/10
(`masked_lm.corrupt`), per token. Predicting a whole span from its boundaries is closer to what
extractive tasks (question answering, coreference) ask of a representation.
"""

import torch

from lmlab.objectives.masked_lm import corrupt
from lmlab.objectives.masking_row import word_masking_objective
from lmlab.objectives.objective import Objective
from lmlab.objectives.whole_word import word_ids

GEOMETRIC_P, MAX_SPAN = 0.2, 10


def span_length_probabilities(p: float = GEOMETRIC_P, max_len: int = MAX_SPAN) -> torch.Tensor:
    """(max_len,) p(l) for l = 1..max_len: geometric with parameter p, renormalised to sum to one."""
    lengths = torch.arange(1, max_len + 1, dtype=torch.float64)
    weights = p * (1 - p) ** (lengths - 1)
    return weights / weights.sum()


def sample_span_lengths(n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """(n,) span lengths in words, drawn from `span_length_probabilities`."""
    return torch.multinomial(span_length_probabilities(), n, replacement=True, generator=generator) + 1


def span_chosen(special: torch.Tensor, continuation: torch.Tensor, generator: torch.Generator | None = None,
                rate: float = 0.15) -> torch.Tensor:
    """(B, T) bool: spans of whole words, each starting at a word boundary, until round(rate *
    eligible tokens) tokens of the row are chosen. special (B, T) marks tokens never chosen."""
    chosen = torch.zeros_like(special)
    words = word_ids(continuation)
    for row in range(special.size(0)):
        chosen[row] = _row_spans(special[row], words[row], generator, rate)
    return chosen


def _row_spans(special: torch.Tensor, words: torch.Tensor, generator: torch.Generator | None,
               rate: float) -> torch.Tensor:
    """One row (T,) of `span_chosen`: draw spans until the budget is reached or no word is left."""
    n_words = int(words[-1]) + 1
    word_special = torch.zeros(n_words, dtype=torch.bool).scatter_reduce(0, words, special, reduce="amax").tolist()
    sizes = torch.bincount(words, minlength=n_words).tolist()  # tokens per word
    free = [w for w in range(n_words) if not word_special[w]]  # words a span may start at
    masked_words = [False] * n_words
    budget, used, word = max(1, round(rate * int((~special).sum()))), 0, 0
    while used < budget and free:
        start = free[int(torch.randint(len(free), (1,), generator=generator))]
        length = int(sample_span_lengths(1, generator))
        word = start
        while word < n_words and word < start + length and not word_special[word] and used < budget:
            if not masked_words[word]:
                masked_words[word] = True
                used += sizes[word]
            word += 1
        free = [w for w in free if not masked_words[w]]
    chosen = torch.tensor(masked_words)[words] & ~special  # (T,)
    extra = used - budget  # the last word may overshoot: unmask its last pieces so the budget holds exactly
    if extra > 0:
        last = torch.nonzero(words == word - 1).flatten()[-extra:]
        chosen[last] = False
    return chosen


def span_masked_lm(ids: torch.Tensor, special: torch.Tensor, continuation: torch.Tensor, mask_id: int,
                   vocab_size: int, generator: torch.Generator | None = None,
                   rate: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """SpanBERT masking: ids, special, continuation (B, T) -> (inputs, targets) as `masked_lm`."""
    return corrupt(ids, span_chosen(special, continuation, generator, rate), mask_id, vocab_size, generator)


def span_masking_objective(tokenizer) -> Objective:
    """`span_masked_lm` bound to a WordPiece tokenizer: objective(row, key) -> (inputs, targets)."""
    return word_masking_objective(tokenizer, span_masked_lm)
