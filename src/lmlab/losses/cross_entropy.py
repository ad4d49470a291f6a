"""Token-level cross-entropy, the loss of every language-modelling objective.

The loss is the usual -log softmax(logits)[target]; only its backward is hand-written. PyTorch's
`F.cross_entropy` backward builds a dense (N, V) one-hot gradient and then a second (N, V) tensor
for the log-softmax backward; with a large vocabulary these are the biggest tensors of a training
step, and allocating them (fresh pages from the OS each time) costs as much as a matmul. Here the
gradient softmax - one_hot is written over the saved log-probabilities instead: no new (N, V)
tensor in the backward, the same numbers up to float rounding.
"""

import torch

from lmlab.targets import IGNORE_INDEX


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean (or summed, or per-position with "none") -log p(target) over positions whose target is
    not IGNORE_INDEX, like `F.cross_entropy(..., ignore_index=IGNORE_INDEX)`.

    logits (B, T, V) in any dtype (computed in fp32); targets (B, T) int.
    """
    keep = targets.flatten() != IGNORE_INDEX  # (N,)
    nll = _TokenNLL.apply(logits.flatten(0, 1).float(), targets.flatten().where(keep, 0)) * keep  # (N,)
    if reduction == "mean":
        return nll.sum() / keep.sum()
    if reduction == "sum":
        return nll.sum()
    if reduction == "none":
        return nll.view(targets.shape)
    raise ValueError(f"reduction '{reduction}' is unknown; use mean, sum or none")


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) at every position (B, T), 0 where the target is IGNORE_INDEX."""
    return -cross_entropy(logits, targets, reduction="none")


class _TokenNLL(torch.autograd.Function):
    """-log_softmax(logits)[n, targets[n]] for each row n; logits (N, V) fp32, targets (N,) -> (N,)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        log_probs = logits.log_softmax(dim=-1)  # (N, V)
        ctx.save_for_backward(log_probs, targets)
        return -log_probs.gather(1, targets[:, None]).squeeze(1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        # d nll[n] / d logits[n] = softmax(logits[n]) - one_hot(targets[n]), computed in place over
        # log_probs (owned by this node; autograd's version check refuses a second backward).
        log_probs, targets = ctx.saved_tensors
        grad = grad[:, None]  # (N, 1)
        grad_logits = log_probs.exp_().mul_(grad)  # (N, V)
        grad_logits.scatter_add_(1, targets[:, None], -grad)
        return grad_logits, None
