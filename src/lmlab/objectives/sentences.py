"""Sentences of a token-id document: the unit that BART's sentence permutation shuffles and that
Pegasus's gap-sentence generation masks. A sentence ends *after* a sentence-end id (".", "!", "?",
or a tokenizer's own separator), so joining the sentences gives the document back.
"""

from collections.abc import Collection


def split_sentences(tokens: list[int], sentence_end_ids: Collection[int]) -> list[list[int]]:
    """Cut `tokens` after each id in `sentence_end_ids`; a trailing piece without an end is a
    sentence too. Concatenating the result gives `tokens` back; an empty document has no sentence."""
    ends = set(sentence_end_ids)
    sentences, current = [], []
    for token in tokens:
        current.append(token)
        if token in ends:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return sentences
