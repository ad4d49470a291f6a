"""Direct Preference Optimization (Rafailov et al. 2023) and its successors, as one loss with a name.

The KL-regularised RLHF objective max E[r] - beta * KL(pi || pi_ref) has the closed-form optimum
pi*(y|x) proportional to pi_ref(y|x) exp(r(x, y) / beta), so any policy defines an implicit reward
    r(x, y) = beta * log(pi(y|x) / pi_ref(y|x))    (up to a term in x alone, which cancels in pairs).
Putting that reward into the Bradley-Terry loss of a reward model gives DPO:
    L = -mean log sigma(beta * (log pi(y_w)/pi_ref(y_w) - log pi(y_l)/pi_ref(y_l))),
a classification loss on preference pairs trained straight into the policy. Its successors change
the function of the log-ratio margin h = log pi(y_w)/pi_ref(y_w) - log pi(y_l)/pi_ref(y_l), or drop
the reference (`preference_loss`, names as `lmlab dpo --loss` takes them; TRL's names in brackets):

    dpo     -log sigma(beta h)                                             (DPOTrainer "sigmoid")
    cdpo    -(1-e) log sigma(beta h) - e log sigma(-beta h): labels flipped with probability e
                                                  (DPOTrainer "sigmoid" with label_smoothing before TRL 1.0)
    robust  [-(1-e) log sigma(beta h) + e log sigma(-beta h)] / (1-2e): unbiased under flips (DPOTrainer "robust")
    ipo     (h' - 1/(2 beta))^2, h' the margin of per-token log-ratios             (DPOTrainer "ipo")
    simpo   -log sigma(beta (a_w - a_l) - gamma), a = mean log pi per answer token, no reference
                                                              (CPOTrainer "simpo", cpo_alpha 0)
    orpo    NLL(y_w) - beta log sigma(log odds(y_w) - log odds(y_l)), odds = p / (1 - p) of p = exp(a),
            no reference                                                            (ORPOTrainer)
"""

import torch
import torch.nn.functional as F

from lmlab.losses.bradley_terry import bradley_terry_loss
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.losses.preference_kinds import PREFERENCE_LOSSES, REFERENCE_FREE


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


def preference_loss(loss: str, policy: torch.Tensor, lengths: torch.Tensor, reference: torch.Tensor | None = None,
                    beta: float = 0.1, label_smoothing: float = 0.0,
                    simpo_gamma: float = 0.5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The loss named `loss` (one of `PREFERENCE_LOSSES`, formulas above) of a batch of pairs, and the
    implicit rewards of the chosen and the rejected answers, for logging: beta * log-ratio, or for the
    reference-free losses beta * mean log-prob per token (as TRL logs them).

    policy (B, 2): log p(answer | prompt) summed over the answer's tokens, chosen then rejected;
    lengths (B, 2): the answers' token counts; reference (B, 2) or None for `REFERENCE_FREE` losses.
    `label_smoothing` is e of cdpo, robust and simpo; `simpo_gamma` SimPO's target margin.
    Returns loss (scalar), rewards (B,), (B,).
    """
    if loss in REFERENCE_FREE:
        return reference_free_loss(loss, policy, lengths, beta, label_smoothing, simpo_gamma)
    if loss == "dpo":
        return dpo_loss(policy[:, 0], policy[:, 1], reference[:, 0], reference[:, 1], beta)
    ratios = policy - reference  # (B, 2)
    rewards = beta * ratios.detach()
    if loss == "ipo":
        per_token = ratios / lengths.clamp(min=1)  # (B, 2): IPO's margin is per token, as in TRL
        losses = (per_token[:, 0] - per_token[:, 1] - 1 / (2 * beta)) ** 2
    elif loss == "cdpo":
        losses = smoothed_logistic(beta * (ratios[:, 0] - ratios[:, 1]), label_smoothing)
    elif loss == "robust":
        margin = beta * (ratios[:, 0] - ratios[:, 1])
        losses = (-(1 - label_smoothing) * F.logsigmoid(margin)
                  + label_smoothing * F.logsigmoid(-margin)) / (1 - 2 * label_smoothing)
    else:
        raise ValueError(f"unknown preference loss {loss!r}; the names are {', '.join(PREFERENCE_LOSSES)}")
    return losses.mean(), rewards[:, 0], rewards[:, 1]


def reference_free_loss(loss: str, policy: torch.Tensor, lengths: torch.Tensor, beta: float, label_smoothing: float,
                        simpo_gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SimPO's or ORPO's loss (`preference_loss`): both score an answer by its mean log-prob per token."""
    average = policy / lengths.clamp(min=1)  # (B, 2)
    rewards = beta * average.detach()
    if loss == "simpo":
        losses = smoothed_logistic(beta * (average[:, 0] - average[:, 1]) - simpo_gamma, label_smoothing)
        return losses.mean(), rewards[:, 0], rewards[:, 1]
    log_odds = (average[:, 0] - average[:, 1]) - (log1mexp(average[:, 0]) - log1mexp(average[:, 1]))  # (B,)
    nll = -policy[:, 0].sum() / lengths[:, 0].sum().clamp(min=1)  # the SFT loss on the chosen answers' tokens
    return nll - beta * F.logsigmoid(log_odds).mean(), rewards[:, 0], rewards[:, 1]


def smoothed_logistic(margin: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """-(1-e) log sigma(m) - e log sigma(-m) of each margin m: the logistic loss when a label is wrong
    with probability e (conservative DPO)."""
    return -(1 - label_smoothing) * F.logsigmoid(margin) - label_smoothing * F.logsigmoid(-margin)


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - e^x) for x < 0, accurate near 0 and far below it (branch at -log 2)."""
    return torch.where(x < -0.6931471805599453, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def sequence_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(answer | prompt) of each row: the sum of log p(labels_t) over the positions whose label
    is not IGNORE_INDEX (the answer's tokens; prompt and padding carry IGNORE_INDEX).

    logits (B, T, V); labels (B, T), aligned with logits as targets are (already shifted by one)
    -> (B,) in fp32.
    """
    return -cross_entropy(logits, labels, reduction="none").sum(dim=1)
