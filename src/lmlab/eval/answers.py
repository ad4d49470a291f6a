"""What counts as the right answer: multiple-choice picks, exact match, chain-of-thought extraction, votes.

Multiple choice follows lm-evaluation-harness: `acc` picks the choice with the highest summed
log-probability, `acc_norm` the highest log-probability per character of the choice's text (the
choice without the space before it, `len` of the string, as lm-eval's `completion_len`); ties go to
the first choice, as `np.argmax` gives them.

Exact match compares `normalize(prediction)` with `normalize(target)`:
  - lower case, surrounding whitespace removed, runs of whitespace collapsed to one space;
  - trailing punctuation (. , ! ? ; :) and surrounding quotes removed;
  - when the target is a number, the first number in the prediction is compared as a number
    ("6 apples." and "6.0" both match 6; thousands commas are ignored).

A chain of thought is read by `extract_answer`: the text after its last "answer is" (to the end of
that sentence), else its last number, else its last word.
"""

import re
from collections import Counter
from collections.abc import Sequence

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_ANSWER_IS = re.compile(r"answer is\s*:?\s*(.*?)(?:\.(?:\s|$)|\n|$)", re.IGNORECASE)
_TRAILING = ".,!?;:"
_QUOTES = "\"'`"


def best_choice(logprobs: Sequence[float], lengths: Sequence[float] | None = None) -> int:
    """The index of the highest `logprobs[i]` (divided by `lengths[i]` when given); the first on a tie."""
    scores = list(logprobs) if lengths is None else [lp / n for lp, n in zip(logprobs, lengths)]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def choice_hits(logprobs: Sequence[float], choices: Sequence[str], gold: int) -> tuple[bool, bool]:
    """(acc, acc_norm) of one question: whether the most likely choice is `gold`, by summed
    log-probability and by log-probability per character of the choice text."""
    return best_choice(logprobs) == gold, best_choice(logprobs, [len(c) for c in choices]) == gold


def normalize(text: str) -> str:
    """`text` lower-cased, whitespace collapsed, trailing punctuation and surrounding quotes removed."""
    text = " ".join(text.lower().split())
    while text and (text[-1] in _TRAILING or text[-1] in _QUOTES or text[0] in _QUOTES):
        text = text.rstrip(_TRAILING).strip(_QUOTES).strip()
    return text


def as_number(text: str) -> float | None:
    """The value of `text` when, without thousands commas, it is one number; else None."""
    text = text.replace(",", "")
    return float(text) if _NUMBER.fullmatch(text) else None


def first_number(text: str) -> float | None:
    """The first number written in `text` (thousands commas ignored), or None."""
    found = _NUMBER.search(text.replace(",", ""))
    return float(found.group()) if found else None


def exact_match(prediction: str, target: str) -> bool:
    """Whether `prediction` says `target` after `normalize` (numbers compared by value)."""
    gold = normalize(target)
    value = as_number(gold)
    if value is not None:
        return first_number(normalize(prediction)) == value
    return normalize(prediction) == gold


def extract_answer(chain: str) -> str | None:
    """The final answer of a chain of thought: what follows its last "answer is" up to the end of that
    sentence, else its last number, else its last word (None for empty text)."""
    stated = [m.group(1) for m in _ANSWER_IS.finditer(chain) if m.group(1).strip()]
    if stated:
        return stated[-1].strip()
    numbers = _NUMBER.findall(chain.replace(",", ""))
    if numbers:
        return numbers[-1]
    words = chain.split()
    return words[-1] if words else None


def majority(answers: Sequence[str | None]) -> str | None:
    """The most frequent answer, as first written; answers are counted together when they normalise
    alike (a leading number by value: "6", "6.0" and "6 apples" are one vote each for 6). None and
    empty answers are left out; a tie goes to the answer seen first. Self-consistency's vote."""
    kept = [a for a in answers if a is not None and normalize(a)]
    if not kept:
        return None
    keys = [_vote_key(a) for a in kept]
    counts = Counter(keys)
    top = max(counts.values())
    return next(answer for answer, key in zip(kept, keys) if counts[key] == top)


def _vote_key(answer: str) -> str:
    """The answer normalised, or the value of the number it starts with."""
    text = normalize(answer)
    number = _NUMBER.match(text.replace(",", ""))
    return str(float(number.group())) if number else text
