"""Dynamic masking draws a new mask each epoch, the same one when an epoch is replayed (resume),
independently of the batch an example is in; static masking keeps one mask for every epoch."""

import torch
from tokenizers.models import WordLevel

from lmlab.objectives.dynamic_masking import example_key
from lmlab.objectives.masked_lm import masked_lm_objective
from tokenizers import Tokenizer

V = 1000
VOCAB = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4} | {f"w{i}": i for i in range(5, V)}
mask = masked_lm_objective(Tokenizer(WordLevel(VOCAB, unk_token="[UNK]")))


def batch(rows: int = 6, T: int = 64) -> list[list[int]]:
    return torch.randint(5, V, (rows, T), generator=torch.Generator().manual_seed(0)).tolist()


def masked(examples: list[int], epoch: int | None, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) (B, T) of the examples, each masked with its own key."""
    rows = batch()
    pairs = [mask(rows[e], example_key(seed, e, epoch)) for e in examples]
    return torch.tensor([i for i, _ in pairs]), torch.tensor([t for _, t in pairs])


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
