"""Reward-model, PPO, KL and DPO losses against values worked out by hand."""

import math

import pytest
import torch

from lmlab.losses.bradley_terry import bradley_terry_loss, pairwise_accuracy, ranked_pairs
from lmlab.losses.dpo import dpo_loss, sequence_logprobs
from lmlab.losses.kl import AdaptiveKLController, FixedKLController, kl_k3, kl_penalty, shaped_rewards
from lmlab.losses.ppo import entropy_from_logits, gae, masked_mean, ppo_policy_loss, ppo_value_loss, whiten
from lmlab.targets import IGNORE_INDEX


def softplus(x: float) -> float:
    """-log sigmoid(-x) = log(1 + e^x)."""
    return math.log(1 + math.exp(x))


def close(tensor: torch.Tensor, expected) -> None:
    expected = torch.as_tensor(expected, dtype=torch.float64)
    assert torch.allclose(tensor.double(), expected, atol=1e-6), (tensor, expected)


# Bradley-Terry

def test_bradley_terry_loss_is_mean_negative_log_sigmoid_of_reward_gaps():
    loss = bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0]))
    close(loss, (softplus(-1.0) + softplus(1.0)) / 2)  # gaps +1 and -1


def test_ranked_pairs_lists_every_better_worse_pair_once():
    better, worse = ranked_pairs(3)
    assert list(zip(better.tolist(), worse.tolist())) == [(0, 1), (0, 2), (1, 2)]
    assert len(ranked_pairs(4)[0]) == 6 and len(ranked_pairs(1)[0]) == 0


def test_ranked_loss_averages_over_all_pairs_of_a_prompt():
    rewards = torch.tensor([[3.0, 1.0, 2.0]])  # K = 3 answers, best first; the model swaps the last two
    better, worse = ranked_pairs(3)
    loss = bradley_terry_loss(rewards[:, better], rewards[:, worse])
    close(loss, (softplus(-2.0) + softplus(-1.0) + softplus(1.0)) / 3)
    close(pairwise_accuracy(rewards[:, better], rewards[:, worse]), 2 / 3)


def test_pairwise_accuracy_counts_ties_as_wrong():
    close(pairwise_accuracy(torch.tensor([2.0, 0.0, 1.0]), torch.tensor([1.0, 1.0, 1.0])), 1 / 3)


# masked statistics

def test_masked_mean_ignores_masked_positions_even_nan():
    x = torch.tensor([[1.0, 2.0, float("nan")], [3.0, float("inf"), 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    close(masked_mean(x, mask), 2.0)


def test_whiten_gives_zero_mean_unit_variance_on_masked_positions():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    out = whiten(x, torch.tensor([[1, 1, 1, 0]]))
    sd = math.sqrt(2 / 3)  # mean 2, variance (1 + 0 + 1) / 3
    close(out, [[-1 / sd, 0.0, 1 / sd, 0.0]])


# GAE

def test_gae_with_gamma_and_lambda_one_is_reward_to_go_minus_value():
    rewards = torch.tensor([[0.0, 0.5, -0.2, 1.0, 7.0]])  # prompt token, 3 response tokens, padding
    values = torch.tensor([[9.0, 0.3, 0.1, 0.4, 9.0]])
    mask = torch.tensor([[0, 1, 1, 1, 0]])
    advantages, returns = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    reward_to_go = [0.0, 0.5 - 0.2 + 1.0, -0.2 + 1.0, 1.0, 0.0]
    close(returns, [reward_to_go])
    close(advantages, [[0.0, 1.3 - 0.3, 0.8 - 0.1, 1.0 - 0.4, 0.0]])


def test_gae_matches_the_recursion_by_hand():
    rewards, values = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, 1.0]])
    advantages, returns = gae(rewards, values, torch.ones(1, 2), gamma=0.9, lam=0.8)
    delta_1 = 2.0 - 1.0  # last token: no value after the end
    delta_0 = 1.0 + 0.9 * 1.0 - 0.5
    a_0 = delta_0 + 0.9 * 0.8 * delta_1
    close(advantages, [[a_0, delta_1]])
    close(returns, [[a_0 + 0.5, delta_1 + 1.0]])


def test_gae_rows_end_where_their_mask_ends():
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.4, 5.0, 5.0], [0.1, 0.2, 0.3, 0.4]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    advantages, _ = gae(rewards, values, mask, gamma=0.9, lam=0.95)
    alone, _ = gae(rewards[:1, :2], values[:1, :2], mask[:1, :2], gamma=0.9, lam=0.95)
    close(advantages[0, :2], alone[0])  # the values 5.0 past the end leak nowhere
    close(advantages[0, 2:], [0.0, 0.0])


# PPO losses

def test_ppo_policy_loss_clips_and_counts_clipped_tokens():
    ratio = torch.tensor([[1.5, 0.5, 1.1, 1.5, 3.0]])
    advantages = torch.tensor([[1.0, -1.0, 2.0, -1.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    old = torch.full((1, 5), -2.0)
    logprobs = (old + ratio.log()).requires_grad_()
    loss, clip_fraction, approx_kl = ppo_policy_loss(logprobs, old, advantages, mask, clip=0.2)
    # per token max(-A rho, -A clip(rho)): -1.2 (clipped), 0.8 (clipped), -2.2 (inside), 1.5 (unclipped wins)
    close(loss, (-1.2 + 0.8 - 2.2 + 1.5) / 4)
    close(clip_fraction, 2 / 4)
    k3 = [r - 1 - math.log(r) for r in (1.5, 0.5, 1.1, 1.5)]  # KL(pi_old || pi): samples from pi_old, r = pi / pi_old
    close(approx_kl, sum(k3) / 4)
    loss.backward()
    close(logprobs.grad, [[0.0, 0.0, -2.0 * 1.1 / 4, 1.5 / 4, 0.0]])  # clipped tokens give no gradient


def test_ppo_value_loss_takes_the_worse_of_clipped_and_unclipped():
    values, old_values = torch.tensor([[1.0, 0.0, 4.0]]), torch.tensor([[0.5, 0.5, 0.0]])
    returns, mask = torch.tensor([[2.0, 0.0, 0.0]]), torch.tensor([[1, 1, 0]])
    loss = ppo_value_loss(values, old_values, returns, mask, clip=0.2)
    # token 0: (1 - 2)^2 = 1 vs clipped (0.7 - 2)^2 = 1.69; token 1: 0 vs (0.3 - 0)^2 = 0.09
    close(loss, 0.5 * (1.69 + 0.09) / 2)


def test_entropy_from_logits_on_known_distributions():
    p = [0.5, 0.25, 0.25]
    logits = torch.tensor([[[math.log(q) for q in p], [0.0, 0.0, 0.0], [9.0, 0.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0]])
    entropy = -sum(q * math.log(q) for q in p)
    close(entropy_from_logits(logits, mask), (entropy + math.log(3)) / 2)


# KL

def test_kl_estimates_per_token():
    logprobs, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-2.0, -1.0]])
    close(kl_penalty(logprobs, ref), [[1.0, -1.0]])
    close(kl_k3(logprobs, ref), [[math.exp(-1) - 1 + 1, math.exp(1) - 1 - 1]])
    assert (kl_k3(torch.randn(4, 8), torch.randn(4, 8)) >= 0).all()


def test_shaped_rewards_penalise_every_token_and_score_the_last():
    score = torch.tensor([1.0, -2.0])
    logprobs = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-1.0, -1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.5, -0.5, -1.0], [-1.0, -2.0, -1.0, -1.5]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]])
    rewards = shaped_rewards(score, logprobs, ref, mask, kl_coef=0.1)
    close(rewards, [[0.0, -0.1 * 0.5, -0.1 * -0.5 + 1.0, 0.0],
                    [0.0, -0.1 * 1.0, -0.1 * 0.0, -0.1 * 0.5 - 2.0]])


def test_adaptive_kl_controller_moves_beta_towards_the_target():
    high = AdaptiveKLController(init=0.1, target=6.0, horizon=10_000)
    high.update(current_kl=9.0, n_steps=256)  # error clipped to +0.2
    assert high.value == pytest.approx(0.1 * (1 + 0.2 * 256 / 10_000))
    low = AdaptiveKLController(init=0.1, target=6.0, horizon=10_000)
    low.update(current_kl=5.4, n_steps=256)  # error -0.1
    assert low.value == pytest.approx(0.1 * (1 - 0.1 * 256 / 10_000))
    fixed = FixedKLController(0.1)
    fixed.update(current_kl=100.0, n_steps=256)
    assert fixed.value == 0.1


# DPO

def test_dpo_loss_and_implicit_rewards_by_hand():
    loss, chosen, rejected = dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]),
                                      torch.tensor([-2.0]), torch.tensor([-2.0]), beta=0.5)
    close(chosen, [0.5])  # 0.5 * (-1 - -2)
    close(rejected, [-0.5])
    close(loss, softplus(-1.0))  # -log sigmoid(0.5 - -0.5)


def test_dpo_loss_is_log_two_when_policy_equals_reference():
    logps = torch.tensor([-4.0, -7.0])
    loss, _, _ = dpo_loss(logps, logps - 1, logps, logps - 1, beta=0.1)
    close(loss, math.log(2))


def test_sequence_logprobs_sums_only_the_labelled_tokens():
    logits = torch.tensor([[[0.0, 1.0, 2.0], [1.0, 1.0, 1.0], [2.0, 0.0, 0.0]]])  # (1, 3, 3)
    labels = torch.tensor([[IGNORE_INDEX, 2, 0]])
    expected = math.log(1 / 3) + (2.0 - math.log(math.exp(2) + 2))
    close(sequence_logprobs(logits, labels), [expected])
