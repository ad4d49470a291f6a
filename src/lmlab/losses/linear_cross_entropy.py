"""The LM head and the cross-entropy in one chunked op, so the (N, vocab) logits never exist whole.

A causal LM's last step is logits = h W^T followed by -log softmax(logits)[target]. Written as two
ops, the logits, their log-probabilities and their gradient are each an (N, V) tensor: the largest
tensors of a training step (2048 tokens x 8192 words is 64 MB each; x 49152 words, 400 MB), fresh
pages from the OS every step. Here rows go through in chunks of a few MB that stay in cache: each
chunk's logits become its loss and, since the loss is the last op of the step, at once its
gradient softmax - one_hot, which is multiplied back into the gradients of h and W. Same FLOPs,
same numbers up to float rounding, and the memory of a chunk instead of three (N, V) tensors.
"""

import torch
from torch import nn

from lmlab.objectives.causal_lm import IGNORE_INDEX

CHUNK_LOGITS = 1 << 22  # logits per chunk (16 MB in fp32): big enough for fast matmuls, small enough for cache


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean -log softmax(hidden W^T)[target] over positions whose target is not IGNORE_INDEX.

    Equal to `cross_entropy(hidden @ weight.T, targets)` (0, not NaN, when every target is ignored).
    hidden (..., C); weight (V, C), the LM head's; targets (...) int. Under autocast the matmuls run
    in the autocast dtype and the softmax in fp32, as they would unfused.
    """
    return _LinearCrossEntropy.apply(hidden.flatten(0, -2), weight, targets.flatten())


class CausalLMLoss(nn.Module):
    """(inputs, targets) -> mean next-token loss of `model`, through `linear_cross_entropy`.

    `model` is a decoder with `hidden_states` and a bias-free `lm_head`. The wrapper is a module so
    that DistributedDataParallel and torch.compile can wrap the whole loss computation; it holds no
    weights of its own, so checkpoints keep saving `model` itself.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        hidden = self.model.hidden_states(inputs)  # (B, T, C)
        return linear_cross_entropy(hidden, self.model.lm_head.weight, targets)


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    device = t.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else t.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    """hidden (N, C), weight (V, C), targets (N,) -> scalar mean NLL; gradients made in the forward."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        dtype = _compute_dtype(hidden)
        with torch.autocast(hidden.device.type, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)  # (N, C), (V, C)
            keep = targets != IGNORE_INDEX  # (N,)
            scale = keep.float() / keep.sum().clamp(min=1)  # (N,): d mean / d nll[n]
            safe = targets.where(keep, 0)[:, None]  # (N, 1)
            grad_h = torch.empty_like(h)  # (N, C)
            grad_w = torch.zeros_like(weight, dtype=torch.float32)  # (V, C)
            loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
            rows = max(1, CHUNK_LOGITS // weight.size(0))
            for s in range(0, h.size(0), rows):
                e = min(s + rows, h.size(0))
                logits = (h[s:e] @ w.t()).float()  # (n, V)
                target_logit = logits.gather(1, safe[s:e])  # (n, 1)
                row_max = logits.amax(dim=-1, keepdim=True)  # (n, 1)
                unnormalised = logits.sub_(row_max).exp_()  # in place of the logits: one exp per logit
                z = unnormalised.sum(dim=-1, keepdim=True)  # (n, 1)
                loss += ((row_max + z.log() - target_logit).squeeze(1) * scale[s:e]).sum()  # log Z - logit[target]
                weight_n = scale[s:e, None]  # (n, 1)
                grad_logits = unnormalised.mul_(weight_n / z)  # softmax, scaled
                grad_logits.scatter_add_(1, safe[s:e], -weight_n)  # - one_hot, scaled
                grad_logits = grad_logits.to(dtype)  # (n, V) = d loss / d logits
                torch.mm(grad_logits, w, out=grad_h[s:e])
                if dtype == torch.float32:
                    grad_w.addmm_(grad_logits.t(), h[s:e])
                else:
                    grad_w += (grad_logits.t() @ h[s:e]).float()
        ctx.save_for_backward(grad_h.to(hidden.dtype), grad_w.to(weight.dtype))
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad, grad_w * grad, None
