"""SQuAD's answer metrics: exact match and token F1, after normalising both answers.

Normalising lower-cases, removes punctuation, drops the articles "a", "an", "the" and collapses
whitespace, so "The Eiffel Tower." and "eiffel tower" are the same answer. With several gold
answers a prediction gets the best score over them.
"""

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, strip punctuation and articles, collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals a normalised gold answer, else 0.0."""
    return float(any(normalize_answer(prediction) == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: Sequence[str]) -> float:
    """The best F1 over gold answers of the normalised tokens shared with the prediction (as multisets)."""
    return max(_token_f1(normalize_answer(prediction).split(), normalize_answer(a).split()) for a in answers)


def _token_f1(predicted: list[str], gold: list[str]) -> float:
    if not predicted or not gold:
        return float(predicted == gold)  # both empty: a match; one empty: nothing shared
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)
