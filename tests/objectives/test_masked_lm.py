"""Masked LM: 15% of the eligible tokens chosen, of those 80% [MASK] / 10% random / 10% unchanged
(checked statistically on 200k tokens), special tokens never chosen, loss only where chosen, and
masks that depend on the generator alone (dynamic masking draws new ones each step)."""

import torch

from lmlab.objectives.masked_lm import masked_lm
from lmlab.targets import IGNORE_INDEX

V, MASK = 1000, 4


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (400, 500), generator=g)  # ids 0-4 are special
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True  # [CLS] ... [SEP]
    special[:200, 400:] = True  # padding
    return ids, special


def five_sd(p: float, n: int) -> float:
    """Five standard deviations of a share p measured over n independent draws."""
    return 5 * (p * (1 - p) / n) ** 0.5


def test_proportions_are_bert_s():
    ids, special = batch()
    inputs, targets = masked_lm(ids, special, MASK, V, torch.Generator().manual_seed(1))
    chosen = targets != IGNORE_INDEX
    eligible = (~special).sum().item()
    n = chosen.sum().item()
    # 0.15 of ~180k eligible, then 0.8 / 0.1 / 0.1 of ~27k chosen, each within 5 binomial s.d.
    assert abs(n / eligible - 0.15) < five_sd(0.15, eligible)
    masked = (inputs[chosen] == MASK).float().mean().item()
    kept = (inputs[chosen] == ids[chosen]).float().mean().item()
    replaced = ((inputs[chosen] != ids[chosen]) & (inputs[chosen] != MASK)).float().mean().item()
    assert abs(masked - 0.8) < five_sd(0.8, n)
    assert abs(kept - (0.1 + 0.1 / V)) < five_sd(0.1, n)  # a random draw can hit the original token
    assert abs(replaced - 0.1 * (1 - 2 / V)) < five_sd(0.1, n)


def test_special_tokens_are_never_chosen_and_the_rest_is_untouched():
    ids, special = batch(2)
    inputs, targets = masked_lm(ids, special, MASK, V, torch.Generator().manual_seed(3))
    chosen = targets != IGNORE_INDEX
    assert not (chosen & special).any()
    assert torch.equal(targets[chosen], ids[chosen])  # the loss asks for the original token
    assert torch.equal(inputs[~chosen], ids[~chosen])


def test_masks_follow_the_generator():
    ids, special = batch()
    first = masked_lm(ids, special, MASK, V, torch.Generator().manual_seed(7))
    again = masked_lm(ids, special, MASK, V, torch.Generator().manual_seed(7))
    other = masked_lm(ids, special, MASK, V, torch.Generator().manual_seed(8))  # the next step's masks
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[1], other[1])
