"""Replaced-token detection inputs: samples go to the chosen positions only, and a sample equal to
the original token is labelled original."""

import torch

from lmlab.objectives.replaced_token import replace_with_samples


def test_samples_fill_the_chosen_positions_and_labels_mark_real_changes():
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    chosen = torch.tensor([[False, True, False, True], [True, False, False, False]])
    logits = torch.full((3, 20), -1e9)
    logits[0, 6] = logits[1, 3] = logits[2, 1] = 0.0  # certain samples: 6 (= original), 3, 1
    inputs, labels = replace_with_samples(ids, chosen, logits, torch.Generator().manual_seed(0))
    assert inputs.tolist() == [[5, 6, 7, 3], [1, 10, 11, 12]]
    assert labels.tolist() == [[0, 0, 0, 1], [1, 0, 0, 0]]


def test_samples_follow_the_generator_s_distribution():
    n = 20000
    ids = torch.zeros(1, n, dtype=torch.long)
    logits = torch.log(torch.tensor([0.0, 0.25, 0.75])).expand(n, 3)
    inputs, _ = replace_with_samples(ids, torch.ones(1, n, dtype=torch.bool), logits, torch.Generator().manual_seed(1))
    share = (inputs == 2).float().mean().item()
    assert abs(share - 0.75) < 5 * (0.75 * 0.25 / n) ** 0.5 and not (inputs == 0).any()
