"""Staying close to the reference model: the per-token KL penalty of RLHF and its coefficient.

PPO on a reward model alone finds answers the reward model likes and no human would (reward
hacking). Ziegler et al. (2019) and InstructGPT therefore optimise the shaped reward
    R(x, y) = r(x, y) - beta * log(pi(y | x) / pi_ref(y | x)),
whose expectation over y ~ pi is r - beta * KL(pi || pi_ref). The log-ratio splits into one term per
generated token, so each token pays -beta * (log pi(y_t) - log pi_ref(y_t)) and the last token also
gets the reward model's score (`shaped_rewards`). beta is fixed, or adapted to hold the KL near a
target (`AdaptiveKLController`).

Two estimators of KL(pi || pi_ref) from tokens sampled from pi, with r = pi_ref(y_t) / pi(y_t)
(Schulman, "Approximating KL divergence", 2020):
    k1 = -log r               unbiased, the one the shaped reward uses; single tokens can be < 0
    k3 = (r - 1) - log r      unbiased too, never negative and of lower variance; good for logging
"""

import torch


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k1 estimate log pi(y_t) - log pi_ref(y_t) of KL(pi || pi_ref); (B, T) -> (B, T)."""
    return logprobs - ref_logprobs


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate (r - 1) - log r, r = pi_ref(y_t) / pi(y_t), of KL(pi || pi_ref): never
    negative, zero only where the two agree. (B, T) -> (B, T).
    """
    log_ratio = ref_logprobs - logprobs  # log r, (B, T)
    return log_ratio.exp() - 1 - log_ratio


@torch.no_grad()
def shaped_rewards(score: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                   mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """Per-token rewards for PPO: -kl_coef * (log pi - log pi_ref) on every response token, plus the
    reward model's `score` on the last one. Zero outside the response.

    score (B,); logprobs, ref_logprobs (B, T) of the sampled tokens; mask (B, T), 1 on response
    tokens -> rewards (B, T). Rewards are constants of the PPO step, hence no gradient.
    """
    keep = mask.bool()  # (B, T)
    rewards = torch.where(keep, -kl_coef * kl_penalty(logprobs, ref_logprobs), 0.0)  # (B, T)
    positions = torch.arange(mask.shape[1], device=mask.device)  # (T,)
    last = torch.where(keep, positions, -1).argmax(dim=1)  # (B,) index of each row's last response token
    rewards[torch.arange(len(score), device=mask.device), last] += score.to(rewards.dtype)
    return rewards


class AdaptiveKLController:
    """beta that steers the measured KL towards `target` (Ziegler et al. 2019):
        e = clip(KL / target - 1, -0.2, 0.2),  beta <- beta * (1 + e * n_steps / horizon).
    Too much KL raises beta, too little lowers it; the clip and the horizon keep each change small.
    `value` is the current beta (save it in checkpoints so a resumed run carries on).
    """

    def __init__(self, init: float, target: float, horizon: int):
        self.value = init
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adjust beta after `n_steps` samples whose mean KL to the reference was `current_kl`."""
        error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self.value *= 1 + error * n_steps / self.horizon


class FixedKLController:
    """A constant beta with the same interface as `AdaptiveKLController` (`update` changes nothing)."""

    def __init__(self, value: float):
        self.value = value

    def update(self, current_kl: float, n_steps: int) -> None:
        """Keep beta as it is; here so either controller can be passed to a PPO loop."""
