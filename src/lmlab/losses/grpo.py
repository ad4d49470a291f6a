"""Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath; the RL step of DeepSeek-R1).

PPO needs a value head to tell a good token from a lucky one. GRPO drops it: it samples a group of K
replies to each prompt, scores each whole reply once, and takes the group as the baseline,

    A_i = (r_i - mean(r_1..r_K)) / (std(r_1..r_K) + eps)          (`group_advantages`)

the same advantage for every token of reply i. A group whose replies all score the same teaches
nothing (every A_i = 0). Dr. GRPO (Liu et al. 2025) leaves out the division by the std (`scale=False`),
which otherwise weighs nearly-solved and nearly-hopeless prompts up.

The loss (`grpo_loss`) is PPO's clipped surrogate on each reply token, with the KL to the reference
policy inside the loss rather than in the reward:

    per token: max(-A rho_t, -A clip(rho_t, 1 - eps, 1 + eps)) + beta * k3_t,   rho_t = pi(y_t) / pi_old(y_t)
    k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1      (never negative; `losses.kl.kl_k3`)

averaged in one of two ways:
    "sequence"  mean over each reply's tokens, then over the replies: DeepSeekMath's 1/G sum_i 1/|o_i| sum_t,
                TRL's loss_type="grpo". A short reply's tokens weigh more than a long one's.
    "token"     mean over every reply token of the batch: each token counts the same (DAPO; TRL's "bnpo").

Every tensor is (B, T) over the sequence positions of B = prompts x K replies, grouped: rows
g*K .. g*K+K-1 hold the replies to prompt g; `mask` is 1 on reply tokens.
"""

from typing import Literal

import torch

from lmlab.losses.kl import kl_k3
from lmlab.losses.ppo import clipped_surrogate, masked_mean

ADVANTAGE_EPS = 1e-4  # TRL's; a group whose rewards barely differ gets advantages of at most ~1/eps

Average = Literal["sequence", "token"]


@torch.no_grad()
def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True) -> torch.Tensor:
    """Each reply's reward against its group's: (r - mean) / (std + eps) within each group of `group_size`
    consecutive replies (std with Bessel's correction, as TRL), or r - mean with `scale=False` (Dr. GRPO).
    rewards (B,), B a multiple of group_size >= 2 -> advantages (B,)."""
    groups = rewards.view(-1, group_size)  # (B / K, K)
    advantages = groups - groups.mean(dim=1, keepdim=True)
    if scale:
        advantages = advantages / (groups.std(dim=1, keepdim=True) + ADVANTAGE_EPS)
    return advantages.view(-1)


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, clip: float = 0.2, kl_coef: float = 0.04,
              average: Average = "sequence") -> tuple[torch.Tensor, dict]:
    """GRPO's loss (see the module docstring) and what to log: the clip fraction and the mean k3 KL to the
    reference over the reply tokens. logprobs (B, T) of the sampled tokens now (with gradient);
    old_logprobs (B, T) at sampling time; ref_logprobs (B, T) under the reference (None when kl_coef is
    0: no reference is needed); advantages (B,); mask (B, T)."""
    mask = mask.to(logprobs.dtype)
    per_token, clipped = clipped_surrogate(logprobs, old_logprobs, advantages[:, None], clip)  # (B, T)
    logged = {"clip_fraction": masked_mean(clipped.float(), mask).item()}
    if kl_coef > 0:
        kl = kl_k3(logprobs, ref_logprobs)  # (B, T)
        per_token = per_token + kl_coef * kl
        logged["kl_k3"] = masked_mean(kl.detach(), mask).item()
    if average == "sequence":
        loss = ((per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()
    else:
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1)
    return loss, logged
