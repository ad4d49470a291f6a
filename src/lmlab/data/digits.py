"""Reversing digit strings: a trivial sequence-to-sequence task ("4821" -> "1284").

Small enough for a tiny model to learn in seconds, so tests can show that training works; it
also needs attention to copy in reverse order, which makes its attention map an anti-diagonal.
"""

import itertools
import random

from lmlab.data.pairs import PairSplits, TaskSizes, split_keys


def reverse_task(seed: int = 0, sizes: TaskSizes = TaskSizes(), length: int = 4) -> PairSplits:
    """(digits, reversed digits) pairs of `length` digits in three splits that share no string."""
    rng = random.Random(seed)
    strings = ["".join(digits) for digits in itertools.product("0123456789", repeat=length)]
    train, validation, test = split_keys(strings, sizes.held_out_fraction, rng)

    def pairs(keys: list[str], n: int) -> list[tuple[str, str]]:
        return [(s, s[::-1]) for s in (rng.choice(keys) for _ in range(n))]

    return PairSplits(pairs(train, sizes.train), pairs(validation, sizes.validation), pairs(test, sizes.test))
