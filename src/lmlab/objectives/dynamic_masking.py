"""Static and dynamic masking (RoBERTa): when an example's mask is drawn.

BERT drew each example's mask once, while preparing its data (static; it duplicated the data ten
times with different masks to soften this). RoBERTa draws a new mask every time an example is
seen (dynamic), which is as good or better and needs no copies. Here it is only a choice of key
(`objectives.objective`): (seed, example) for static masking, (seed, example, epoch + 1) for
dynamic masking. So a run resumed mid-epoch draws the same masks, and an example's mask does not
depend on which batch it lands in (the masking objectives draw over the row as the batch pads it,
so the row's width is part of the example).
"""

from lmlab.objectives.objective import Key


def example_key(seed: int, example: int, epoch: int | None = None) -> Key:
    """The key of one example's mask: (seed, example), with the epoch too when masking is dynamic
    (`epoch` given). Static masking passes epoch=None."""
    return (seed, example) if epoch is None else (seed, example, epoch + 1)
