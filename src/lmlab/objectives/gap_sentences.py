"""Pegasus gap-sentence generation: hide whole sentences of a document, each behind one mask
token, and make the decoder write them: a pre-training task shaped like summarisation.

The sentences to hide are those that best summarise the rest ("principal", Pegasus's Ind-Orig):
each sentence is scored alone by ROUGE-1 F1 of its tokens against all the other sentences' tokens,
and the top max(1, round(ratio * n)) are picked. "lead" (the first sentences) and "random" are the
baselines of the paper. Pegasus's own ratio is 30 %.

    sentences  s0 s1 s2 s3        (s2 overlaps most with the others)
    inputs     s0 s1 <mask_1> s3
    targets    s2
"""

import random
from collections import Counter
from collections.abc import Callable

from lmlab.errors import LmlabError
from lmlab.objectives.objective import Key, Objective, Tokens
from lmlab.objectives.sentences import sentence_end_ids, split_sentences
from lmlab.tokenizers.encoder_decoder_bpe import MASK

PEGASUS_RATIO = 0.3  # the share of a document's sentences Pegasus masks


def rouge1_f1(candidate: list[int], reference: list[int]) -> float:
    """ROUGE-1 F1 of two token lists: unigram overlap (counts clipped to the other side's), the
    harmonic mean of precision overlap/|candidate| and recall overlap/|reference|; 0 if either is empty."""
    return _f1(Counter(candidate), Counter(reference), len(candidate), len(reference))


def _f1(candidate: Counter, reference: Counter, n_candidate: int, n_reference: int) -> float:
    overlap = sum(min(n, reference[token]) for token, n in candidate.items())
    return 2 * overlap / (n_candidate + n_reference) if overlap else 0.0  # = 2PR / (P + R)


def sentence_scores(sentences: list[list[int]]) -> list[float]:
    """ROUGE-1 F1 of each sentence against the rest of the document (the other sentences joined);
    the rest's counts are the document's minus the sentence's, so scoring is linear in the length."""
    document = Counter(t for sentence in sentences for t in sentence)
    total = sum(document.values())
    scores = []
    for sentence in sentences:
        own = Counter(sentence)
        rest = Counter({token: document[token] - n for token, n in own.items()})  # only the tokens overlap can use
        scores.append(_f1(own, rest, len(sentence), total - len(sentence)))
    return scores


def principal(sentences: list[list[int]], n_gaps: int, rng: random.Random | None) -> list[int]:
    """Indices of the n_gaps best-scored sentences (`sentence_scores`); ties go to the earlier one."""
    scores = sentence_scores(sentences)
    return sorted(range(len(sentences)), key=lambda i: -scores[i])[:n_gaps]


def lead(sentences: list[list[int]], n_gaps: int, rng: random.Random | None) -> list[int]:
    """Indices of the first n_gaps sentences."""
    return list(range(n_gaps))


def uniform(sentences: list[list[int]], n_gaps: int, rng: random.Random | None) -> list[int]:
    """Indices of n_gaps sentences drawn uniformly without replacement."""
    if rng is None:
        raise LmlabError('gap-sentence strategy "random" needs an rng; pass rng=random.Random(seed)')
    return rng.sample(range(len(sentences)), n_gaps)


STRATEGIES: dict[str, Callable[[list[list[int]], int, random.Random | None], list[int]]] = {
    "principal": principal, "lead": lead, "random": uniform}


def gap_sentences(sentences: list[list[int]], mask_sentence_id: int, ratio: float = PEGASUS_RATIO,
                  strategy: str = "principal", rng: random.Random | None = None) -> tuple[list[int], list[int]]:
    """Pegasus's pre-training pair (inputs, targets) for one document given as its sentences.

    inputs: the document with each picked sentence replaced by one mask_sentence_id; targets: the
    picked sentences joined in document order (append eos yourself). `rng` is used by "random" only.
    """
    if strategy not in STRATEGIES:
        raise LmlabError(f"unknown gap-sentence strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    if not 0 < ratio <= 1:
        raise LmlabError(f"gap-sentence ratio {ratio} must be in (0, 1] (Pegasus uses 0.3)")
    if not sentences:
        raise LmlabError("gap sentences need a document of at least one sentence; pass more text")
    picked = set(STRATEGIES[strategy](sentences, max(1, round(ratio * len(sentences))), rng))
    inputs = [t for i, s in enumerate(sentences) for t in ([mask_sentence_id] if i in picked else s)]
    targets = [t for i, s in enumerate(sentences) if i in picked for t in s]
    return inputs, targets


def gap_sentences_objective(tokenizer, ratio: float = PEGASUS_RATIO) -> Objective:
    """`gap_sentences` ("principal", so the key draws nothing) bound to a tokenizer holding <mask>,
    the tokens cut into sentences at its sentence ends: objective(tokens, key) -> (inputs, targets)."""
    mask, ends = tokenizer.token_to_id(MASK), sentence_end_ids(tokenizer)

    def objective(tokens: Tokens, key: Key) -> tuple[Tokens, Tokens]:
        return gap_sentences(split_sentences(tokens, ends), mask, ratio)
    return objective
