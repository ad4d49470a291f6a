"""Whole-word masking: a word's pieces are chosen together or not at all, the chosen tokens stay
within 15% of the eligible ones and come close to it (statistically, over many rows), specials
are never chosen, and the 80/10/10 corruption applies to the chosen tokens."""

import torch

from lmlab.objectives.masking_row import continuation_table
from lmlab.objectives.whole_word import whole_word_chosen, whole_word_masked_lm, word_ids
from lmlab.targets import IGNORE_INDEX

V, MASK = 1000, 4
CONTINUATION_IDS = range(500, 1000)  # in these tests ids 500-999 are "##" pieces


def batch(seed: int = 0, rows: int = 300, T: int = 128):
    """Random words of 1-4 pieces between [CLS] and [SEP], some rows padded."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 500, (rows, T), generator=g)  # word starts
    pieces = torch.rand(rows, T, generator=g) < 0.4  # ~40% of tokens continue the word before them
    ids = torch.where(pieces, torch.randint(500, V, (rows, T), generator=g), ids)
    ids[:, 0], ids[:, -1] = 2, 3
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    special[: rows // 2, 100:] = True  # padding
    ids[:, 1] = 10  # the first real token starts a word
    return ids, special, (ids >= 500) & ~special


def test_continuation_table_marks_hash_pieces():
    table = continuation_table({"[PAD]": 0, "un": 1, "##believ": 2, "##able": 3, "cat": 4})
    assert table.tolist() == [False, False, True, True, False]
    assert word_ids(table[torch.tensor([[1, 2, 3, 4]])]).tolist() == [[0, 0, 0, 1]]


def test_words_are_chosen_whole():
    ids, special, continuation = batch()
    chosen = whole_word_chosen(special, continuation, torch.Generator().manual_seed(1))
    words = word_ids(continuation)
    for row in range(ids.size(0)):
        for word in torch.unique(words[row][chosen[row]]):
            assert chosen[row][words[row] == word].all()  # every piece of a chosen word


def test_budget_is_fifteen_percent_of_eligible_tokens():
    ids, special, continuation = batch(2)
    chosen = whole_word_chosen(special, continuation, torch.Generator().manual_seed(3))
    eligible = (~special).sum(dim=1)
    budget = torch.round(0.15 * eligible)
    assert not (chosen & special).any()
    assert (chosen.sum(dim=1) <= budget).all()
    # a row stops short of its budget by less than one word (words here have 1.7 pieces on average)
    shortfall = (budget - chosen.sum(dim=1)).float().mean().item()
    assert shortfall < 1.7, shortfall
    assert abs(chosen.sum().item() / eligible.sum().item() - 0.15) < 0.01


def test_chosen_tokens_are_corrupted_80_10_10_and_targets_are_the_originals():
    ids, special, continuation = batch(4)
    inputs, targets = whole_word_masked_lm(ids, special, continuation, MASK, V, torch.Generator().manual_seed(5))
    chosen = targets != IGNORE_INDEX
    n = chosen.sum().item()
    assert torch.equal(targets[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])
    masked = (inputs[chosen] == MASK).float().mean().item()
    assert abs(masked - 0.8) < 5 * (0.8 * 0.2 / n) ** 0.5


def test_masks_follow_the_generator():
    ids, special, continuation = batch(6, rows=8)
    first = whole_word_chosen(special, continuation, torch.Generator().manual_seed(7))
    assert torch.equal(first, whole_word_chosen(special, continuation, torch.Generator().manual_seed(7)))
    assert not torch.equal(first, whole_word_chosen(special, continuation, torch.Generator().manual_seed(8)))
