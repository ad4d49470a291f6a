"""Sentence-order prediction (ALBERT) as a transformation of documents into labelled segment pairs.

Next-sentence prediction (BERT) mixes two questions, "same topic?" and "in order?", and the topic
one is easy; RoBERTa found NSP could be dropped. ALBERT keeps a sentence-level task but makes both
segments come from the same place: two consecutive segments in their order (label 1) or swapped
(label 0), half each. Only coherence tells them apart. Pairs are packed as for NSP (`pack_pair`).
"""

import random

from lmlab.errors import LmlabError
from lmlab.objectives.next_sentence import Sentence


def sentence_order_pairs(documents: list[list[Sentence]], rng: random.Random) -> list[tuple[Sentence, Sentence, int]]:
    """(A, B, in_order) for every two consecutive segments of a document: (first, second, 1) or
    (second, first, 0), each with probability 1/2."""
    pairs = []
    for doc in documents:
        for first, second in zip(doc, doc[1:]):
            pairs.append((first, second, 1) if rng.random() < 0.5 else (second, first, 0))
    if not pairs:
        raise LmlabError("sentence-order pairs need a document of at least two segments; pass more text")
    return pairs
