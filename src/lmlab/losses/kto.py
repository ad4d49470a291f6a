"""Kahneman-Tversky Optimization (Ethayarajh et al. 2024): alignment from unpaired good and bad answers.

DPO needs a better and a worse answer to the same prompt; KTO needs only answers labelled desirable
or undesirable. With the implicit reward r = log pi(y|x) / pi_ref(y|x) of DPO, an answer's value is
measured against a reference point z0, an estimate of KL(pi || pi_ref): the mean log-ratio of
mismatched (prompt, answer) pairs, clamped at 0 and without gradient. Per answer:
    desirable:    w_d * (1 - sigma(beta (r - z0)))
    undesirable:  w_u * (1 - sigma(beta (z0 - r)))
so the model gains by raising good answers above the reference point and pushing bad ones below it;
the weights w_d, w_u make up for unbalanced data (the paper keeps w_d n_d / (w_u n_u) in [1, 4/3]).
This is TRL's KTOTrainer loss, loss_type "kto".
"""

import torch


def kto_loss(policy: torch.Tensor, reference: torch.Tensor, desirable: torch.Tensor, policy_kl: torch.Tensor,
             reference_kl: torch.Tensor, beta: float = 0.1, desirable_weight: float = 1.0,
             undesirable_weight: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The KTO loss of a batch of B answers, their implicit rewards beta * log-ratio (no gradient, for
    logging) and the reference point z0.

    policy, reference (B,): log p(answer | prompt) summed over the answer's tokens; desirable (B,) bool;
    policy_kl, reference_kl (B,): the same for mismatched pairs (a prompt with another example's
    answer). Returns loss (scalar), rewards (B,), z0 (scalar).
    """
    kl = (policy_kl - reference_kl).mean().detach().clamp(min=0)
    ratios = policy - reference  # (B,)
    losses = torch.where(desirable, desirable_weight * (1 - torch.sigmoid(beta * (ratios - kl))),
                         undesirable_weight * (1 - torch.sigmoid(beta * (kl - ratios))))
    return losses.mean(), beta * ratios.detach(), kl
