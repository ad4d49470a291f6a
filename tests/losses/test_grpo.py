"""GRPO's group advantages and loss: against values worked out by hand, and against TRL's GRPOTrainer
loss (its own `_compute_loss`, run on the same log-probs, advantages and masks)."""

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from lmlab.losses.grpo import ADVANTAGE_EPS, group_advantages, grpo_loss


def close(tensor, expected) -> None:
    expected = torch.as_tensor(expected, dtype=torch.float64)
    assert torch.allclose(torch.as_tensor(tensor).double(), expected, atol=1e-6), (tensor, expected)


def test_group_advantages_are_rewards_against_their_own_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0, 5.0, 5.0, 5.0])  # two groups of K = 4
    sd = math.sqrt((4 * 0.25) / 3)  # Bessel: squared deviations 0.25 each, over K - 1
    close(group_advantages(rewards, 4), [0.5 / (sd + ADVANTAGE_EPS), -0.5 / (sd + ADVANTAGE_EPS),
                                         -0.5 / (sd + ADVANTAGE_EPS), 0.5 / (sd + ADVANTAGE_EPS), 0, 0, 0, 0])
    close(group_advantages(rewards, 4, scale=False), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])  # Dr. GRPO
    close(group_advantages(rewards, 2, scale=False), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])


def test_at_the_sampling_policy_the_loss_is_minus_the_mean_advantage_plus_the_kl():
    logprobs = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]])
    ref = torch.tensor([[-1.5, -2.0, 0.0], [-0.5, -1.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    advantages = torch.tensor([1.0, -2.0])
    k3 = [[math.exp(-0.5) + 0.5 - 1, 0.0, 0.0], [0.0, math.exp(-0.5) + 0.5 - 1, math.exp(9.5) - 9.5 - 1]]
    loss, logged = grpo_loss(logprobs, logprobs, ref, advantages, mask, clip=0.2, kl_coef=0.1)
    by_reply = [(-1.0 * 2 + 0.1 * k3[0][0]) / 2, (2.0 * 3 + 0.1 * (k3[1][1] + k3[1][2])) / 3]
    close(loss, sum(by_reply) / 2)
    tokens, _ = grpo_loss(logprobs, logprobs, ref, advantages, mask, clip=0.2, kl_coef=0.1, average="token")
    close(tokens, (-2.0 + 0.1 * k3[0][0] + 6.0 + 0.1 * (k3[1][1] + k3[1][2])) / 5)
    close(logged["kl_k3"], (k3[0][0] + k3[1][1] + k3[1][2]) / 5)
    assert logged["clip_fraction"] == 0.0


def test_the_ratio_is_clipped_where_it_would_push_further():
    old = torch.zeros(1, 2)
    logprobs = torch.tensor([[math.log(1.5), math.log(0.5)]], requires_grad=True)  # rho 1.5 and 0.5
    loss, logged = grpo_loss(logprobs, old, None, torch.tensor([1.0]), torch.ones(1, 2), clip=0.2, kl_coef=0.0)
    close(loss, (-1.2 - 0.5) / 2)  # the first clipped at 1 + 0.2; the second is below 1 - 0.2 but A > 0 keeps it
    loss.backward()
    close(logprobs.grad, [[0.0, -0.5 * 0.5]])  # no gradient through the clipped token; d(-rho / 2) / dlogp
    assert logged["clip_fraction"] == 0.5 and "kl_k3" not in logged


def trl_loss(logprobs, old, ref, advantages, mask, beta, clip, loss_type) -> torch.Tensor:
    """TRL's `GRPOTrainer._compute_loss` on these tensors: the trainer is a stand-in holding the attributes
    the method reads (TRL's defaults: token-level ratios, two-sided clip at epsilon, no entropy bonus), and
    the model's forward pass is replaced by the given log-probs."""
    trainer_module = pytest.importorskip("trl.trainer.grpo_trainer")
    per_token = SimpleNamespace(  # accelerate's reduce/gather on one process
        reduce=lambda t, reduction: t, gather=lambda t: t, gather_for_metrics=lambda t: t)
    stand_in = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logprobs, torch.zeros_like(logprobs), None),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token", beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None), loss_type=loss_type, epsilon_low=clip,
        epsilon_high=clip, use_vllm=False, model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1,
        _entropy_bonus_enabled=False, aux_loss_enabled=False, _metrics={"train": defaultdict(list)},
        accelerator=per_token)
    n = logprobs.shape[0]
    inputs = {"prompt_ids": torch.zeros(n, 1, dtype=torch.long), "prompt_mask": torch.ones(n, 1, dtype=torch.long),
              "completion_ids": torch.zeros_like(mask), "completion_mask": mask, "advantages": advantages,
              "old_per_token_logps": old, "ref_per_token_logps": ref}
    return trainer_module.GRPOTrainer._compute_loss(stand_in, None, inputs)


@pytest.mark.parity
@pytest.mark.parametrize("average, loss_type", [("sequence", "grpo"), ("token", "bnpo")])
def test_loss_and_gradient_match_trls_grpo_trainer(average, loss_type):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(8, generator=gen).round()  # K = 4 replies to 2 prompts, right or wrong
    advantages = group_advantages(rewards, 4)
    old = -torch.rand(8, 6, generator=gen) * 3  # (B, T) log-probs at sampling time
    ref = old + 0.3 * torch.randn(8, 6, generator=gen)
    mask = (torch.arange(6) < torch.randint(1, 7, (8, 1), generator=gen)).long()  # replies of 1..6 tokens
    now = (old + 0.4 * torch.randn(8, 6, generator=gen)).requires_grad_(True)  # after a few steps: some clip
    ours, _ = grpo_loss(now, old, ref, advantages, mask, clip=0.2, kl_coef=0.04, average=average)
    (ours_grad,) = torch.autograd.grad(ours, now)
    theirs = trl_loss(now, old, ref, advantages, mask, beta=0.04, clip=0.2, loss_type=loss_type)
    (theirs_grad,) = torch.autograd.grad(theirs, now)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_grad, theirs_grad)


@pytest.mark.parity
def test_advantages_match_trls_group_normalisation():
    trl_utils = pytest.importorskip("trl.trainer.utils")
    rewards = torch.tensor([0.2, 1.0, 0.8, 0.2, -0.5, 0.0, 1.0, 1.0, 0.3])
    groups = rewards.view(-1, 3)  # TRL's scale_rewards="group": (r - group mean) / (nanstd + 1e-4)
    mean = groups.mean(1).repeat_interleave(3)
    std = trl_utils.nanstd(groups, dim=1).repeat_interleave(3)
    close(group_advantages(rewards, 3), (rewards - mean) / (std + 1e-4))
