"""Dynamic masking draws a new mask each epoch, the same one when an epoch is replayed (resume),
independently of the batch an example is in; static masking keeps one mask for every epoch."""

from functools import partial

import torch

from lmlab.objectives.dynamic_masking import example_generator, mask_each
from lmlab.objectives.masked_lm import masked_lm

V, MASK = 1000, 4
mask = partial(masked_lm, mask_id=MASK, vocab_size=V)


def batch(rows: int = 6, T: int = 64):
    ids = torch.randint(5, V, (rows, T), generator=torch.Generator().manual_seed(0))
    return ids, torch.zeros_like(ids, dtype=torch.bool)


def masked(examples: list[int], epoch: int | None, seed: int = 0):
    ids, special = batch()
    rows = (ids[examples], special[examples])
    return mask_each(mask, rows, [example_generator(seed, e, epoch) for e in examples])


def test_dynamic_masks_differ_between_epochs_and_repeat_within_one():
    first, again, second = masked([0, 1, 2], epoch=0), masked([0, 1, 2], epoch=0), masked([0, 1, 2], epoch=1)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    for row in range(3):
        assert not torch.equal(first[1][row], second[1][row])


def test_static_masks_are_the_same_every_epoch_and_differ_between_examples():
    once, twice = masked([0, 1], epoch=None), masked([0, 1], epoch=None)
    assert all(torch.equal(a, b) for a, b in zip(once, twice))
    assert not torch.equal(once[1][0] == -100, once[1][1] == -100)
    assert not torch.equal(masked([0], epoch=None)[1], masked([0], epoch=0)[1])


def test_an_example_s_mask_does_not_depend_on_its_batch():
    alone = masked([4], epoch=3)
    batched = masked([1, 4, 2], epoch=3)
    assert torch.equal(alone[0][0], batched[0][1]) and torch.equal(alone[1][0], batched[1][1])


def test_the_seed_changes_the_masks():
    assert not torch.equal(masked([0], epoch=0, seed=0)[1], masked([0], epoch=0, seed=1)[1])
