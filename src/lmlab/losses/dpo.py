"""Direct Preference Optimization (Rafailov et al. 2023): RLHF without a reward model or PPO.

The KL-regularised RLHF objective max E[r] - beta * KL(pi || pi_ref) has the closed-form optimum
pi*(y|x) proportional to pi_ref(y|x) exp(r(x, y) / beta), so any policy defines an implicit reward
    r(x, y) = beta * log(pi(y|x) / pi_ref(y|x))    (up to a term in x alone, which cancels in pairs).
Putting that reward into the Bradley-Terry loss of a reward model gives DPO:
    L = -mean log sigma(beta * (log pi(y_w)/pi_ref(y_w) - log pi(y_l)/pi_ref(y_l))),
a classification loss on preference pairs trained straight into the policy.
"""

import torch

from lmlab.losses.bradley_terry import bradley_terry_loss
from lmlab.losses.cross_entropy import cross_entropy


def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
             ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor,
             beta: float = 0.1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The DPO sigmoid loss, and the implicit rewards beta * (log pi(y) - log pi_ref(y)) of the
    chosen and rejected answers (without gradient, for logging: their gap should grow).

    Each input (B,) holds log p(answer | prompt) summed over the answer's tokens (`sequence_logprobs`);
    the reference ones come from the frozen starting model. Returns loss (scalar), rewards (B,), (B,).
    """
    chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps)  # (B,)
    rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps)  # (B,)
    loss = bradley_terry_loss(chosen_rewards, rejected_rewards)
    return loss, chosen_rewards.detach(), rejected_rewards.detach()


def sequence_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(answer | prompt) of each row: the sum of log p(labels_t) over the positions whose label
    is not IGNORE_INDEX (the answer's tokens; prompt and padding carry IGNORE_INDEX).

    logits (B, T, V); labels (B, T), aligned with logits as targets are (already shifted by one)
    -> (B,) in fp32.
    """
    return -cross_entropy(logits, labels, reduction="none").sum(dim=1)
