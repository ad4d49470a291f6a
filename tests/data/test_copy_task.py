"""The copy task's batches: a random string, a separator and its copy, of which only the copy is scored."""

import torch

from lmlab.data.copy_task import copy_accuracy, copy_batch
from lmlab.targets import IGNORE_INDEX


def test_a_batch_is_a_string_a_separator_and_its_copy():
    inputs, targets = copy_batch(3, 10, symbols=5, seed=0, step=7)
    assert inputs.shape == targets.shape == (3, 10)
    strings = inputs[:, :5]
    assert (inputs[:, 5] == 5).all() and torch.equal(inputs[:, 6:], strings[:, :4])  # separator, then the copy
    assert (targets[:, :5] == IGNORE_INDEX).all() and torch.equal(targets[:, 5:], strings)
    assert torch.equal(copy_batch(3, 10, 5, 0, 7)[0], inputs)  # a pure function of (seed, step)
    assert not torch.equal(copy_batch(3, 10, 5, 0, 8)[0], inputs)
    assert not torch.equal(copy_batch(3, 10, 5, 0, 7, held_out=True)[0], inputs)


def test_accuracy_counts_the_copy_only():
    inputs, targets = copy_batch(2, 8, symbols=4, seed=0, step=0)
    perfect = torch.nn.functional.one_hot(targets.clamp(min=0), 5).float()  # (2, 8, 5), right on every copied symbol
    assert copy_accuracy(perfect, targets) == (8, 8)
    perfect[0, 4] = perfect[0, 4].roll(1)
    assert copy_accuracy(perfect, targets) == (7, 8)
