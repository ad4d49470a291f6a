"""SpanBERT span masking: span lengths follow the clipped geometric distribution (checked on 50k
draws), each row masks exactly 15% of its eligible tokens, spans start at word boundaries and
cover whole words (except the piece cut at the budget), specials are never masked."""

import torch

from lmlab.objectives.span_masking import (
    MAX_SPAN,
    sample_span_lengths,
    span_chosen,
    span_length_probabilities,
    span_masked_lm,
)
from lmlab.objectives.whole_word import word_ids
from lmlab.targets import IGNORE_INDEX

V, MASK = 1000, 4


def batch(seed: int = 0, rows: int = 64, T: int = 128):
    """Words of one or more pieces (ids >= 500 continue a word) between [CLS] and [SEP], half the rows padded."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (rows, T), generator=g)
    ids[:, 1] = 10
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    special[: rows // 2, 90:] = True
    return ids, special, (ids >= 500) & ~special


def test_span_lengths_follow_the_geometric_distribution_clipped_at_ten():
    n = 50_000
    lengths = sample_span_lengths(n, torch.Generator().manual_seed(0))
    assert lengths.min() >= 1 and lengths.max() <= MAX_SPAN
    expected = span_length_probabilities()
    assert abs(expected[0] - 0.2 / (1 - 0.8 ** 10)) < 1e-12  # p(1) = p / (1 - (1-p)^10)
    observed = torch.bincount(lengths, minlength=MAX_SPAN + 1)[1:].double() / n
    sd = (expected * (1 - expected) / n).sqrt()
    assert ((observed - expected).abs() < 5 * sd).all(), (observed, expected)
    mean = (expected * torch.arange(1, MAX_SPAN + 1)).sum().item()
    assert abs(lengths.double().mean().item() - mean) < 0.05 and abs(mean - 3.8) < 0.1  # SpanBERT's 3.8


def test_each_row_masks_exactly_its_fifteen_percent_budget_and_never_a_special():
    ids, special, continuation = batch()
    chosen = span_chosen(special, continuation, torch.Generator().manual_seed(1))
    assert not (chosen & special).any()
    assert torch.equal(chosen.sum(dim=1), torch.round(0.15 * (~special).sum(dim=1)).long())


def test_spans_start_at_word_boundaries_and_cover_whole_words():
    ids, special, continuation = batch(2)
    chosen = span_chosen(special, continuation, torch.Generator().manual_seed(3))
    starts = chosen & ~torch.cat([torch.zeros_like(chosen[:, :1]), chosen[:, :-1]], dim=1)  # first of each run
    assert not (starts & continuation).any()
    words = word_ids(continuation)
    split = 0  # words only partly masked: at most one per row (the budget cuts it)
    for row in range(ids.size(0)):
        for word in torch.unique(words[row][chosen[row]]):
            split += not chosen[row][words[row] == word].all()
    assert split <= ids.size(0)


def test_spans_are_longer_than_single_tokens():
    ids, special, _ = batch(4)
    no_pieces = torch.zeros_like(special)
    chosen = span_chosen(special, no_pieces, torch.Generator().manual_seed(5))
    runs = (chosen & ~torch.cat([torch.zeros_like(chosen[:, :1]), chosen[:, :-1]], dim=1)).sum().item()
    assert chosen.sum().item() / runs > 2.5  # token-level masking would give runs of ~1.2


def test_masked_tokens_are_corrupted_80_10_10_with_original_targets():
    ids, special, continuation = batch(6)
    inputs, targets = span_masked_lm(ids, special, continuation, MASK, V, torch.Generator().manual_seed(7))
    chosen = targets != IGNORE_INDEX
    n = chosen.sum().item()
    assert torch.equal(targets[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])
    assert abs((inputs[chosen] == MASK).float().mean().item() - 0.8) < 5 * (0.16 / n) ** 0.5
