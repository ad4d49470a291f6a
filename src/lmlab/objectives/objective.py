"""The one shape of a pre-training objective: a transformation of ONE example into a training pair.

    objective(tokens, key) -> (inputs, targets)

`tokens` are the example's token ids (a chunk of text, a packed block, an encoder row); `key` is a
tuple of ints (and strings) that names this draw, e.g. (seed, example, epoch) or (seed, step, k).
The objective seeds its own random stream from the key, so what it does to an example depends on
the key and the tokens only: a resumed run, another process or another batch order replays it
exactly. A builder binds the objective to a tokenizer's special ids and its settings
(`span_corruption_objective(tokenizer, noise)`); `objectives.registry` names every builder.
"""

import random
from collections.abc import Callable

import numpy as np
import torch

Tokens = list[int]
Key = tuple[int | str, ...]
Objective = Callable[[Tokens, Key], tuple[Tokens, Tokens]]


def python_rng(key: Key) -> random.Random:
    """The Python random stream of `key` (the list-based objectives: span corruption, denoising):
    random.Random seeded by the key's parts joined with ":" (key (0, 3, 1) -> "0:3:1")."""
    return random.Random(":".join(str(part) for part in key))


def seeded_generator(*keys: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator seeded by a tuple of non-negative ints, well mixed (numpy's SeedSequence),
    so nearby tuples give unrelated streams."""
    seed = int(np.random.SeedSequence(list(keys)).generate_state(1, np.uint64)[0] >> 1)
    return torch.Generator(device=device).manual_seed(seed)


def torch_generator(key: Key) -> torch.Generator:
    """The torch random stream of `key` (the tensor-based objectives: the masked LMs); ints only."""
    return seeded_generator(*key)
