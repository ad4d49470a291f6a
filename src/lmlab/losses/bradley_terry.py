"""The reward-model loss: Bradley-Terry pairwise comparisons (Christiano et al. 2017, InstructGPT).

A reward model r(x, y) scores a prompt and an answer with one number. Humans only say which of two
answers is better, so the model is fitted to those comparisons: under Bradley-Terry the chance
that y_w beats y_l is sigma(r(x, y_w) - r(x, y_l)), and training maximises its log-likelihood.
Only differences of rewards matter, so a reward model is free up to a constant.

InstructGPT asks labellers to rank K answers per prompt and trains on all K-choose-2 pairs of a
prompt together, averaged over the pairs; `ranked_pairs` gives those pairs.
"""

import itertools

import torch
import torch.nn.functional as F


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """mean(-log sigma(r_chosen - r_rejected)): the negative log-likelihood that each chosen answer
    beats its rejected one. Any matching shapes, e.g. (B,) or (B, P); returns a scalar.
    """
    return -F.logsigmoid(chosen_rewards - rejected_rewards).mean()


def ranked_pairs(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All K-choose-2 (better, worse) index pairs of K answers ranked best first.

    With rewards (B, K) in rank order, `better, worse = ranked_pairs(K)` and
    `bradley_terry_loss(rewards[:, better], rewards[:, worse])` is InstructGPT's loss: every pair of
    a prompt in one batch, averaged over the pairs. Returns two (K*(K-1)/2,) int64 tensors.
    """
    pairs = list(itertools.combinations(range(k), 2))  # (i, j) with i < j: answer i ranks above j
    better = torch.tensor([i for i, _ in pairs], dtype=torch.long)  # (P,)
    worse = torch.tensor([j for _, j in pairs], dtype=torch.long)  # (P,)
    return better, worse


def pairwise_accuracy(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """The fraction of pairs the reward model orders correctly (r_chosen > r_rejected; ties count
    as wrong). Any matching shapes; returns a scalar.
    """
    return (chosen_rewards > rejected_rewards).float().mean()
