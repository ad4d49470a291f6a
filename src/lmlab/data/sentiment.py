"""A synthetic sentiment task, generated in code: short reviews labelled positive or negative.

The default data of `lmlab finetune --task classify` (`--data sentiment`). It is built so that a
bag of words cannot solve it: the same words carry either label depending on their order.

  - negation flips a clause: "the food was not bad" is positive, "the food was not good" negative;
  - "but" puts the weight on the second clause: "the plot was dull but the acting was superb" is positive;
  - "I expected it to be good, and it was not" reads the negation at the end;
  - intensifiers ("very", "truly") change nothing, so they are noise to learn to ignore.

"the hotel was good , not bad" and "the hotel was bad , not good" hold the same words and opposite
labels. Training and evaluation sets come from different seeds and share no sentence.
"""

import random

from lmlab.errors import LmlabError

LABELS = ("negative", "positive")
SUBJECTS = ("the movie", "the food", "the service", "this phone", "the hotel", "the book", "our trip", "the concert",
            "the plot", "the acting", "the room", "the music", "the staff", "the game", "the coffee", "the show")
POSITIVE = ("good", "great", "excellent", "wonderful", "delightful", "pleasant", "superb", "lovely", "fantastic",
            "enjoyable")
NEGATIVE = ("bad", "terrible", "awful", "boring", "dull", "disappointing", "poor", "horrible", "mediocre", "annoying")
INTENSIFIERS = ("", "", "very ", "really ", "truly ", "quite ", "extremely ")
NEGATIONS = ("not ", "never ", "hardly ")


def _clause(rng: random.Random, positive: bool) -> str:
    """'<subject> was [negation] [intensifier] <adjective>' meaning `positive` (negation flips the adjective)."""
    negated = rng.random() < 0.5
    adjectives = POSITIVE if positive != negated else NEGATIVE
    negation = rng.choice(NEGATIONS) if negated else ""
    return f"{rng.choice(SUBJECTS)} was {negation}{rng.choice(INTENSIFIERS)}{rng.choice(adjectives)}"


def _review(rng: random.Random, positive: bool) -> str:
    """One review whose overall sentiment is `positive`, in one of four shapes."""
    shape = rng.randrange(4)
    if shape == 0:
        return _clause(rng, positive)
    if shape == 1:  # the clause after "but" decides
        return f"{_clause(rng, not positive)} but {_clause(rng, positive)}"
    if shape == 2:  # an adjective, then the opposite one negated: same words, either label
        good, bad = rng.choice(POSITIVE), rng.choice(NEGATIVE)
        first, second = (good, bad) if positive else (bad, good)
        return f"{rng.choice(SUBJECTS)} was {first} , not {second}"
    expected = rng.choice(POSITIVE if rng.random() < 0.5 else NEGATIVE)  # the negation comes last
    met = (expected in POSITIVE) == positive
    return f"i expected {rng.choice(SUBJECTS)} to be {expected} , and it was{'' if met else ' not'}"


def sentiment_examples(n: int, seed: int, exclude: set[str] = frozenset()) -> list[tuple[str, str]]:
    """`n` distinct (text, label) reviews, half positive, none of them in `exclude`."""
    rng = random.Random(seed)
    examples, seen = [], set(exclude)
    for _ in range(200 * n):
        if len(examples) == n:
            return examples
        positive = len(examples) % 2 == 1
        text = _review(rng, positive)
        if text not in seen:
            seen.add(text)
            examples.append((text, LABELS[positive]))
    raise LmlabError(f"cannot draw {n} distinct reviews; ask for fewer")


def sentiment_splits(n_train: int = 2000, n_eval: int = 500, seed: int = 0
                     ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(training, evaluation) reviews from different seeds, no sentence in both."""
    train = sentiment_examples(n_train, seed)
    return train, sentiment_examples(n_eval, seed + 1, exclude={text for text, _ in train})
