"""Next-sentence pairs: half true successors, half sentences from another document; packed with
[CLS]/[SEP] and token types, trimmed to fit."""

import random

import pytest

from lmlab.errors import LmlabError
from lmlab.objectives.next_sentence import next_sentence_pairs, pack_pair


def documents(n_docs: int = 40, n_sentences: int = 30):
    # sentence j of document d is [d, j]: its origin can be read back
    return [[[d, j] for j in range(n_sentences)] for d in range(n_docs)]


def test_half_are_true_successors_and_the_rest_come_from_other_documents():
    pairs = next_sentence_pairs(documents(), random.Random(0))
    assert len(pairs) == 40 * 29
    positives = [(a, b) for a, b, label in pairs if label == 1]
    negatives = [(a, b) for a, b, label in pairs if label == 0]
    assert abs(len(positives) / len(pairs) - 0.5) < 5 * (0.25 / len(pairs)) ** 0.5
    assert all(b == [a[0], a[1] + 1] for a, b in positives)
    assert all(b[0] != a[0] for a, b in negatives)


def test_pairs_are_packed_with_token_types_and_trimmed():
    ids, types = pack_pair([5, 6, 7], [8, 9], cls_id=2, sep_id=3, max_tokens=16)
    assert ids == [2, 5, 6, 7, 3, 8, 9, 3] and types == [0, 0, 0, 0, 0, 1, 1, 1]
    ids, types = pack_pair(list(range(10, 20)), [8, 9], cls_id=2, sep_id=3, max_tokens=8)
    assert len(ids) == 8 and ids[-3:] == [8, 9, 3] and types.count(1) == 3  # the longer sentence was cut


def test_one_document_is_not_enough():
    with pytest.raises(LmlabError, match="two non-empty documents"):
        next_sentence_pairs(documents(n_docs=1), random.Random(0))
