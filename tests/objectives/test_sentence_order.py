"""Sentence-order pairs: consecutive segments of one document, half in order (1), half swapped (0)."""

import random

import pytest

from lmlab.errors import LmlabError
from lmlab.objectives.sentence_order import sentence_order_pairs


def documents(n_docs: int = 40, n_segments: int = 30):
    return [[[d, j] for j in range(n_segments)] for d in range(n_docs)]  # segment j of document d is [d, j]


def test_half_in_order_half_swapped_and_always_neighbours_of_one_document():
    pairs = sentence_order_pairs(documents(), random.Random(0))
    assert len(pairs) == 40 * 29
    in_order = [(a, b) for a, b, label in pairs if label == 1]
    swapped = [(a, b) for a, b, label in pairs if label == 0]
    assert abs(len(in_order) / len(pairs) - 0.5) < 5 * (0.25 / len(pairs)) ** 0.5
    assert all(a[0] == b[0] and b[1] == a[1] + 1 for a, b in in_order)
    assert all(a[0] == b[0] and a[1] == b[1] + 1 for a, b in swapped)


def test_pairs_follow_the_rng():
    assert sentence_order_pairs(documents(), random.Random(1)) == sentence_order_pairs(documents(), random.Random(1))
    assert sentence_order_pairs(documents(), random.Random(1)) != sentence_order_pairs(documents(), random.Random(2))


def test_text_without_two_segments_in_a_document_is_a_clear_error():
    with pytest.raises(LmlabError, match="at least two segments"):
        sentence_order_pairs([[[1, 2]], [[3]], []], random.Random(0))
