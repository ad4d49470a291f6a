"""Source -> target string pairs for sequence-to-sequence tasks, split so that no answer leaks.

A task is a set of *keys* (a date, a digit string) each written as one or more source strings with
one target. Splitting by key rather than by pair keeps every key's answer out of the other splits:
a model that scores well on the test split has learnt the mapping, not memorised the answers.
"""

import random
from dataclasses import dataclass

from lmlab.errors import LmlabError

Pair = tuple[str, str]  # (source, target)


@dataclass(frozen=True)
class PairSplits:
    """A task's training, validation and test pairs; no key appears in two splits."""

    train: list[Pair]
    validation: list[Pair]
    test: list[Pair]


@dataclass(frozen=True)
class TaskSizes:
    """How many pairs each split holds, and which share of the keys the held-out splits take."""

    train: int = 20000
    validation: int = 500
    test: int = 1000
    held_out_fraction: float = 0.1  # of the keys, each for validation and for test

    def __post_init__(self):
        if min(self.train, self.validation, self.test) < 1:
            raise LmlabError(f"every split needs at least one pair, got train={self.train}, "
                             f"validation={self.validation}, test={self.test}")
        if not 0 < self.held_out_fraction < 0.5:
            raise LmlabError(f"held_out_fraction={self.held_out_fraction} must lie in (0, 0.5): "
                             "validation and test each take that share of the keys")


def split_keys(keys: list, fraction: float, rng: random.Random) -> tuple[list, list, list]:
    """(train, validation, test) keys: a shuffled copy of `keys` cut so that validation and test
    each take `fraction` of them (at least one each); disjoint by construction."""
    shuffled = list(keys)
    rng.shuffle(shuffled)
    n_held = max(1, round(len(shuffled) * fraction))
    if len(shuffled) < 2 * n_held + 1:
        raise LmlabError(f"{len(shuffled)} keys are too few to hold out {n_held} for validation and for test")
    return shuffled[2 * n_held:], shuffled[:n_held], shuffled[n_held:2 * n_held]
