"""Proximal Policy Optimization for language models (Schulman et al. 2017; Ziegler et al. 2019).

Each generated token is an action, and PPO improves the policy on a batch of its own samples:
1. per-token rewards (the reward model's score on the last token, a KL penalty on each one; see
   `losses.kl.shaped_rewards`) and a value head's estimates V_t give advantages by GAE (`gae`);
2. for a few epochs over the batch, the policy maximises the clipped surrogate
       min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps) A_t),   rho_t = pi(y_t) / pi_old(y_t),
   which stops a step from moving any token's probability far from where it was sampled
   (`ppo_policy_loss`), while the value head regresses onto the returns (`ppo_value_loss`).

PPO-ptx (InstructGPT) adds gamma * cross-entropy on pre-training text to the same step, so the
model keeps the skills that RLHF alone erodes; that term is `losses.cross_entropy` as in pre-training.

Every tensor is (B, T) over the sequence positions of a batch; `mask` is 1 on the response tokens
being trained on and 0 on prompt and padding, and masked positions never reach a result.
"""

import torch

from lmlab.losses.kl import kl_k3


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` over the positions where `mask` is 1 (any value elsewhere, even nan, is ignored)."""
    keep = mask.bool()
    return torch.where(keep, x, 0.0).sum() / keep.sum()


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the masked positions, 0 elsewhere: advantages with mean 0
    and variance 1 per batch, so the policy step size does not depend on the reward's scale.
    """
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return torch.where(mask.bool(), (x - mean) * torch.rsqrt(var + eps), 0.0)


@torch.no_grad()
def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over each row's response.

        delta_t = r_t + gamma * V_{t+1} - V_t,      A_t = delta_t + gamma * lam * A_{t+1},
    with V and A taken as 0 after the last response token (the episode ends there), and
    returns_t = A_t + V_t, the value head's regression target. lam = 1 gives the Monte-Carlo
    return minus V_t (no bias, high variance); lam = 0 the one-step TD error.

    rewards, values, mask (B, T), each row's response a contiguous run of 1s in `mask` ->
    advantages, returns (B, T), 0 outside the response. Targets are constants: no gradient.
    """
    B, T = rewards.shape
    zero = torch.zeros(B, 1, dtype=values.dtype, device=values.device)  # (B, 1)
    next_mask = torch.cat([mask[:, 1:].to(values.dtype), zero], dim=1)  # (B, T) 1 where t+1 is still response
    next_values = torch.cat([values[:, 1:], zero], dim=1) * next_mask  # (B, T) V_{t+1}, 0 past the end
    deltas = rewards + gamma * next_values - values  # (B, T)
    advantages = torch.zeros_like(deltas)  # (B, T)
    running = zero[:, 0]  # (B,) A_{t+1}
    for t in reversed(range(T)):
        running = deltas[:, t] + gamma * lam * next_mask[:, t] * running
        advantages[:, t] = running
    keep = mask.bool()
    advantages = torch.where(keep, advantages, 0.0)
    return advantages, torch.where(keep, advantages + values, 0.0)


def ppo_policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                    mask: torch.Tensor, clip: float = 0.2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The clipped surrogate, as a loss to minimise:
        mean_t max(-A_t rho_t, -A_t clip(rho_t, 1 - clip, 1 + clip)),   rho_t = exp(logp_t - old_logp_t).

    logprobs (B, T) of the sampled tokens under the current policy (with gradient); old_logprobs
    and advantages (B, T) from sampling time. Returns the loss, the clip fraction (share of tokens
    whose clipped term was the larger one, so they give no gradient) and the k3 estimate of
    KL(pi_old || pi) (both without gradient, for logging and early stopping).
    """
    per_token, clipped = clipped_surrogate(logprobs, old_logprobs, advantages, clip)
    loss = masked_mean(per_token, mask)
    with torch.no_grad():
        clip_fraction = masked_mean(clipped.float(), mask)
        approx_kl = masked_mean(kl_k3(old_logprobs, logprobs), mask)
    return loss, clip_fraction, approx_kl


def clipped_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                      clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token, the clipped surrogate as a loss, max(-A_t rho_t, -A_t clip(rho_t, 1 - clip, 1 + clip)),
    and where the clipped term was the larger (no gradient there): the part PPO and GRPO share.

    logprobs, old_logprobs (B, T); advantages (B, T), or (B, 1) for one advantage per reply (GRPO)
    -> (B, T) losses, (B, T) bools.
    """
    ratio = (logprobs - old_logprobs).exp()  # (B, T)
    unclipped = -advantages * ratio  # (B, T)
    clipped = -advantages * ratio.clamp(1 - clip, 1 + clip)  # (B, T)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).detach()


def ppo_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                   mask: torch.Tensor, clip: float = 0.2) -> torch.Tensor:
    """Clipped value regression: 0.5 * mean_t max((V_t - R_t)^2, (V'_t - R_t)^2), with
    V'_t = old_V_t + clip(V_t - old_V_t, -clip, clip), so one step cannot move a value far either.

    values (B, T) from the value head now (with gradient); old_values, returns (B, T) from sampling time.
    """
    clipped_values = old_values + (values - old_values).clamp(-clip, clip)  # (B, T)
    errors = torch.maximum((values - returns) ** 2, (clipped_values - returns) ** 2)  # (B, T)
    return 0.5 * masked_mean(errors, mask)


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean entropy H = logsumexp(z) - sum_v softmax(z)_v z_v of the next-token distributions over
    the masked positions: a collapsing entropy warns that the policy stopped exploring.

    logits (B, T, V) in any dtype (computed in fp32); mask (B, T) -> scalar.
    """
    logits = logits.float()
    entropy = logits.logsumexp(dim=-1) - (logits.softmax(dim=-1) * logits).sum(dim=-1)  # (B, T)
    return masked_mean(entropy, mask)
