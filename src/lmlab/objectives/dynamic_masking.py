"""Static and dynamic masking (RoBERTa): when an example's mask is drawn.

BERT drew each example's mask once, while preparing its data (static; it duplicated the data ten
times with different masks to soften this). RoBERTa draws a new mask every time an example is
seen (dynamic), which is as good or better and needs no copies. Both are pure functions here: an
example's mask comes from a generator seeded by (seed, example) for static masking and by
(seed, epoch, example) for dynamic masking, so a run resumed mid-epoch draws the same masks, and
an example's mask does not depend on which batch it lands in.
"""

from collections.abc import Callable

import numpy as np
import torch


def example_generator(seed: int, example: int, epoch: int | None = None) -> torch.Generator:
    """The generator of one example's mask: seeded by (seed, example), and by the epoch too when
    masking is dynamic (`epoch` given). Static masking passes epoch=None."""
    return seeded_generator(seed, example) if epoch is None else seeded_generator(seed, example, epoch + 1)


def seeded_generator(*keys: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator seeded by a tuple of non-negative ints, well mixed (numpy's SeedSequence),
    so nearby tuples give unrelated streams."""
    seed = int(np.random.SeedSequence(list(keys)).generate_state(1, np.uint64)[0] >> 1)
    return torch.Generator(device=device).manual_seed(seed)


def mask_each(mask: Callable[..., tuple[torch.Tensor, torch.Tensor]], rows: tuple[torch.Tensor, ...],
              generators: list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply `mask(*row_tensors, generator=g)` (a masking objective) to each example of a batch with
    its own generator: rows are (B, T) tensors (ids, special, …) -> (inputs, targets) (B, T)."""
    out = [mask(*(t[i:i + 1] for t in rows), generator=g) for i, g in enumerate(generators)]
    return torch.cat([inputs for inputs, _ in out]), torch.cat([targets for _, targets in out])
