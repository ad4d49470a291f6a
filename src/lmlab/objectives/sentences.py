"""Sentences of a token-id document: the unit that BART's sentence permutation shuffles and that
Pegasus's gap-sentence generation masks. A sentence ends *after* a sentence-end id (".", "!", "?",
or a tokenizer's own separator), so joining the sentences gives the document back.
"""

from collections.abc import Collection

SENTENCE_ENDS = (".", "!", "?", "\n")  # the tokens that end a sentence, where a tokenizer has them


def sentence_end_ids(tokenizer) -> set[int]:
    """The ids of SENTENCE_ENDS in `tokenizer` (a `tokenizers.Tokenizer`), leaving out those it lacks."""
    return {i for i in (tokenizer.token_to_id(t) for t in SENTENCE_ENDS) if i is not None}


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
