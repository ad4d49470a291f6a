"""Next-sentence prediction (BERT) as a transformation of documents into labelled sentence pairs.

For each sentence A that has a successor, B is that successor half of the time (label 1, "is
next") and a sentence drawn from another document the other half (label 0). The pair is packed
as "[CLS] A [SEP] B [SEP]" with token types 0 for [CLS] A [SEP] and 1 for B [SEP]; the pooled
[CLS] state is classified. Masked LM is then applied on top of the packed ids.
"""

import random

from lmlab.errors import LmlabError

Sentence = list[int]  # token ids


def next_sentence_pairs(documents: list[list[Sentence]], rng: random.Random) -> list[tuple[Sentence, Sentence, int]]:
    """(A, B, is_next) for every sentence A that has a successor in its document."""
    nonempty = [k for k, doc in enumerate(documents) if doc]
    if len(nonempty) < 2:
        raise LmlabError("next-sentence pairs need at least two non-empty documents (the negatives come from "
                         "another document); pass more text")
    pairs = []
    for d, doc in enumerate(documents):
        for i in range(len(doc) - 1):
            if rng.random() < 0.5:
                pairs.append((doc[i], doc[i + 1], 1))
                continue
            other = d
            while other == d:  # any other non-empty document
                other = rng.choice(nonempty)
            pairs.append((doc[i], rng.choice(documents[other]), 0))
    return pairs


def pack_pair(a: Sentence, b: Sentence, cls_id: int, sep_id: int, max_tokens: int) -> tuple[list[int], list[int]]:
    """"[CLS] A [SEP] B [SEP]" and its token types, the longer sentence trimmed first to fit `max_tokens`."""
    a, b = list(a), list(b)
    while len(a) + len(b) + 3 > max_tokens and (a or b):
        (a if len(a) >= len(b) else b).pop()
    ids = [cls_id, *a, sep_id, *b, sep_id]
    return ids, [0] * (len(a) + 2) + [1] * (len(b) + 1)
