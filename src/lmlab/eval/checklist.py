"""CheckList-style behavioural tests of a sentiment classifier (Ribeiro et al., 2020, "Beyond Accuracy").

Accuracy on a held-out set says how often a classifier is right, not what it has learned. A
behavioural test asks one question of many templated sentences and counts the failures:

  - MFT (minimum functionality): simple sentences with a known label ("the food was not great" is
    negative); a failure is a wrong label;
  - INV (invariance): a change that must not move the prediction (another person's name, another
    city, a typo, a neutral phrase); a failure is a changed label;
  - DIR (directional): a change with a known direction: negation must flip the label or lower the
    probability of the original one by FLIP_MARGIN; an intensifier ("very") must not lower the
    probability of the current label by more than INTENSIFIER_TOLERANCE.

Sentences use the embedded sentiment task's words (`lmlab.data.sentiment`) and new ones it never
saw, to probe whether the classifier generalises. The suite is drawn from a seed; the engine only
needs a predictor `predict(texts) -> (labels, probabilities (N, n_labels))` and the label names.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lmlab.data.sentiment import INTENSIFIERS, NEGATIONS, NEGATIVE, POSITIVE, SUBJECTS
from lmlab.errors import LmlabError

SENTIMENTS = ("negative", "positive")
LABEL_SPELLINGS = {"positive": ("positive", "pos"), "negative": ("negative", "neg")}  # run labels accepted
FLIP_MARGIN = 0.2  # negation without a flip must lower the original label's probability at least this much
INTENSIFIER_TOLERANCE = 0.1  # an intensifier may lower the current label's probability at most this much
EXAMPLES_KEPT = 3  # failures shown per test

NEW_SUBJECTS = ("the pasta", "the flight", "the waiter", "the laptop", "the museum", "the series", "the album",
                "the beach", "the lecture", "the sandwich", "the apartment", "the guide")
NEW_POSITIVE = ("amazing", "brilliant", "outstanding", "charming", "marvelous", "impressive", "beautiful",
                "perfect", "nice", "fun")
NEW_NEGATIVE = ("dreadful", "lousy", "bland", "painful", "unpleasant", "tedious", "ugly", "weak", "pathetic",
                "disgusting")
NAMES = ("anna", "john", "maria", "ahmed", "wei", "olga", "carlos", "fatima", "james", "priya", "kenji", "sara")
CITIES = ("paris", "madrid", "tokyo", "lagos", "lima", "oslo", "cairo", "mumbai", "boston", "sydney", "berlin",
          "rome")
NEUTRAL_PREFIXES = ("to be honest , ", "overall , ", "in my opinion , ", "well , ", "so , ")
NEUTRAL_SUFFIXES = (" .", " !", " , as i said", " , i must say", " in the end")
STRONG_INTENSIFIERS = ("very", "really", "truly", "extremely", "incredibly", "so")


@dataclass(frozen=True)
class Case:
    """One test case: `text`; for INV and DIR the `perturbed` text; for MFT the right `label` (a sentiment)."""

    text: str
    perturbed: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class Prediction:
    """What the classifier said of one text, in sentiment names."""

    text: str
    label: str  # "positive" | "negative"
    p_positive: float

    def p(self, sentiment: str) -> float:
        """The probability of `sentiment`."""
        return self.p_positive if sentiment == "positive" else 1.0 - self.p_positive

    def as_dict(self) -> dict:
        return {"text": self.text, "label": self.label, "p_positive": round(self.p_positive, 4)}


@dataclass(frozen=True)
class BehaviourTest:
    """A named test: its type, the capability it probes, its cases and what a passing case looks like."""

    name: str
    kind: str  # MFT | INV | DIR
    capability: str  # Vocabulary, Negation, Contrast, NER, Robustness
    cases: tuple[Case, ...]
    passes: Callable[[Case, Prediction, Prediction | None], bool]  # (case, text's, perturbed's prediction)


@dataclass(frozen=True)
class BehaviourResult:
    """How a test went: cases, failures and up to EXAMPLES_KEPT failing cases with their predictions."""

    name: str
    kind: str
    capability: str
    cases: int
    failures: int
    examples: tuple[dict, ...]  # {"expected": sentiment or None, "predictions": [Prediction.as_dict(), ...]}

    @property
    def failure_rate(self) -> float:
        return self.failures / self.cases

    def as_dict(self) -> dict:
        return {"name": self.name, "type": self.kind, "capability": self.capability, "cases": self.cases,
                "failures": self.failures, "failure_rate": self.failure_rate, "examples": list(self.examples)}


def sentiment_labels(labels: list[str]) -> dict[str, str]:
    """{"positive": run label, "negative": run label} for a classifier whose labels are a positive /
    negative pair (any case; pos/neg too); anything else is refused, as the suite asks about sentiment."""
    found = {sentiment: [label for label in labels if label.lower() in spellings]
             for sentiment, spellings in LABEL_SPELLINGS.items()}
    if len(labels) != 2 or any(len(matches) != 1 for matches in found.values()):
        raise LmlabError(f"the checklist needs a sentiment classifier with labels positive and negative; --model "
                         f"has labels {', '.join(labels) or '(none)'}")
    return {sentiment: matches[0] for sentiment, matches in found.items()}


def run_checklist(tests: list[BehaviourTest], predict: Callable[[list[str]], tuple[list[str], np.ndarray]],
                  labels: list[str]) -> list[BehaviourResult]:
    """Every test's failures under `predict` (run labels `labels`, probabilities in that column order).
    Each distinct text is predicted once, all in one call, so the predictor can batch them."""
    names = sentiment_labels(labels)
    sentiment_of = {label: sentiment for sentiment, label in names.items()}
    texts = list(dict.fromkeys(t for test in tests for case in test.cases for t in (case.text, case.perturbed)
                               if t is not None))
    predicted, probabilities = predict(texts)
    positive = np.asarray(probabilities, dtype=float)[:, labels.index(names["positive"])]  # (N,)
    by_text = {text: Prediction(text, sentiment_of[label], float(p))
               for text, label, p in zip(texts, predicted, positive, strict=True)}
    return [_result(test, by_text) for test in tests]


def _result(test: BehaviourTest, by_text: dict[str, Prediction]) -> BehaviourResult:
    failed = []
    for case in test.cases:
        before, after = by_text[case.text], by_text.get(case.perturbed)
        if not test.passes(case, before, after):
            failed.append({"expected": case.label,
                           "predictions": [p.as_dict() for p in (before, after) if p is not None]})
    return BehaviourResult(test.name, test.kind, test.capability, len(test.cases), len(failed),
                           tuple(failed[:EXAMPLES_KEPT]))


def _right_label(case: Case, before: Prediction, after: Prediction | None) -> bool:
    return before.label == case.label


def _same_label(case: Case, before: Prediction, after: Prediction) -> bool:
    return after.label == before.label


def _flipped(case: Case, before: Prediction, after: Prediction) -> bool:
    return after.label != before.label or after.p(before.label) <= before.p(before.label) - FLIP_MARGIN


def _not_lowered(case: Case, before: Prediction, after: Prediction) -> bool:
    return after.p(before.label) >= before.p(before.label) - INTENSIFIER_TOLERANCE


def checklist_suite(n_cases: int = 100, seed: int = 0) -> list[BehaviourTest]:
    """The sentiment suite, up to `n_cases` distinct cases per test (fewer when a template has fewer),
    drawn from `seed`; each test has its own generator, so one test's cases do not depend on another's."""
    specs = [
        ("sentiment words", "MFT", "Vocabulary", _right_label, _plain(SUBJECTS, POSITIVE, NEGATIVE)),
        ("sentiment words, new vocabulary", "MFT", "Vocabulary", _right_label,
         _plain(NEW_SUBJECTS, NEW_POSITIVE, NEW_NEGATIVE)),
        ("negated positive is negative", "MFT", "Negation", _right_label, _negated(SUBJECTS, POSITIVE, "negative")),
        ("negated negative is positive", "MFT", "Negation", _right_label, _negated(SUBJECTS, NEGATIVE, "positive")),
        ("negation, new vocabulary", "MFT", "Negation", _right_label, _negated_new),
        ("the clause after 'but' decides", "MFT", "Contrast", _right_label, _contrast),
        ("change person names", "INV", "NER", _same_label, _swap(NAMES, ("{x} said {clause}",
                                                                         "i went with {x} and {clause}",
                                                                         "according to {x} , {clause}"))),
        ("change locations", "INV", "NER", _same_label, _swap(CITIES, ("i flew to {x} and {clause}",
                                                                       "{clause} in {x}",
                                                                       "we stayed in {x} , {clause}"))),
        ("typos", "INV", "Robustness", _same_label, _typo),
        ("neutral phrases and punctuation", "INV", "Robustness", _same_label, _neutral),
        ("negation flips the label", "DIR", "Negation", _flipped, _negation_added),
        ("intensifiers keep the label", "DIR", "Vocabulary", _not_lowered, _intensified),
    ]
    return [BehaviourTest(name, kind, capability, _distinct(make, n_cases, random.Random(f"{seed}:{name}")), passes)
            for name, kind, capability, passes, make in specs]


def _distinct(make: Callable[[random.Random], Case], n: int, rng: random.Random) -> tuple[Case, ...]:
    """Up to `n` distinct cases from `make`; stops early when draws keep repeating (a small template)."""
    cases = {}
    for _ in range(20 * n):
        if len(cases) == n:
            break
        case = make(rng)
        cases.setdefault((case.text, case.perturbed), case)
    return tuple(cases.values())


def _sentence(rng: random.Random, subjects, adjectives, middle: str = "") -> str:
    return f"{rng.choice(subjects)} was {middle}{rng.choice(adjectives)}"


def _clause(rng: random.Random) -> str:
    """A plain review clause in the task's words, either sentiment."""
    return _sentence(rng, SUBJECTS, rng.choice((POSITIVE, NEGATIVE)), rng.choice(INTENSIFIERS))


def _plain(subjects, positive, negative) -> Callable[[random.Random], Case]:
    def make(rng: random.Random) -> Case:
        label = rng.choice(SENTIMENTS)
        return Case(_sentence(rng, subjects, positive if label == "positive" else negative), label=label)
    return make


def _negated(subjects, adjectives, label: str) -> Callable[[random.Random], Case]:
    def make(rng: random.Random) -> Case:
        return Case(_sentence(rng, subjects, adjectives, rng.choice(NEGATIONS)), label=label)
    return make


def _negated_new(rng: random.Random) -> Case:
    label = rng.choice(SENTIMENTS)
    adjectives = NEW_NEGATIVE if label == "positive" else NEW_POSITIVE
    return Case(_sentence(rng, NEW_SUBJECTS, adjectives, rng.choice(NEGATIONS)), label=label)


def _contrast(rng: random.Random) -> Case:
    label = rng.choice(SENTIMENTS)
    first, second = (NEGATIVE, POSITIVE) if label == "positive" else (POSITIVE, NEGATIVE)
    return Case(f"{_sentence(rng, SUBJECTS, first)} but {_sentence(rng, SUBJECTS, second)}", label=label)


def _swap(fillers: tuple[str, ...], templates: tuple[str, ...]) -> Callable[[random.Random], Case]:
    """Cases whose perturbation puts another of `fillers` (a name, a city) in the same template."""
    def make(rng: random.Random) -> Case:
        template, clause = rng.choice(templates), _clause(rng)
        first, second = rng.sample(fillers, 2)
        return Case(template.format(x=first, clause=clause), template.format(x=second, clause=clause))
    return make


def _typo(rng: random.Random) -> Case:
    """A clause and the same clause with two adjacent, different letters of one word swapped."""
    text = _clause(rng)
    words = text.split()
    spots = [(w, i) for w, word in enumerate(words) for i in range(len(word) - 1) if word[i] != word[i + 1]]
    w, i = rng.choice(spots)
    word = words[w]
    words[w] = word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return Case(text, " ".join(words))


def _neutral(rng: random.Random) -> Case:
    text = _clause(rng)
    return Case(text, rng.choice((rng.choice(NEUTRAL_PREFIXES) + text, text + rng.choice(NEUTRAL_SUFFIXES))))


def _negation_added(rng: random.Random) -> Case:
    subject, adjective = rng.choice(SUBJECTS + NEW_SUBJECTS), rng.choice(POSITIVE + NEGATIVE)
    return Case(f"{subject} was {adjective}", f"{subject} was {rng.choice(NEGATIONS)}{adjective}")


def _intensified(rng: random.Random) -> Case:
    subject, adjective = rng.choice(SUBJECTS + NEW_SUBJECTS), rng.choice(POSITIVE + NEGATIVE)
    return Case(f"{subject} was {adjective}", f"{subject} was {rng.choice(STRONG_INTENSIFIERS)} {adjective}")
