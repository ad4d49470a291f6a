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
import torch.nn.functional as F
from torch import nn

from lmlab.targets import IGNORE_INDEX

CHUNK_LOGITS = 1 << 22  # logits per chunk (16 MB in fp32): big enough for fast matmuls, small enough for cache


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         bias: torch.Tensor | None = None) -> torch.Tensor:
    """Mean -log softmax(hidden W^T + bias)[target] over positions whose target is not IGNORE_INDEX.

    Equal to `cross_entropy(hidden @ weight.T + bias, targets)` (0, not NaN, when every target is
    ignored). hidden (..., C); weight (V, C), the LM head's; bias (V,) or None; targets (...) int.
    Under autocast the matmuls run in the autocast dtype and the softmax in fp32, as they would unfused.
    """
    hidden, targets = hidden.flatten(0, -2), targets.flatten()  # (N, C), (N,)
    needs_grad = any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    if not (torch.is_grad_enabled() and needs_grad):  # evaluation: the loss alone, a third of the work
        return _chunked_loss(hidden, weight, targets, bias, grads=None)
    return _LinearCrossEntropy.apply(hidden, weight, targets, bias)


class EncoderDecoderLoss(nn.Module):
    """A teacher-forced batch -> mean target-token loss of an `EncoderDecoder`, through
    `linear_cross_entropy` (with BART's fixed logits bias). Like `CausalLMLoss`, weightless."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                decoder_input_ids: torch.Tensor, labels: torch.Tensor,
                decoder_attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        memory = self.model.encode(input_ids, attention_mask)  # (B, S, C)
        hidden = self.model.decoder_hidden(decoder_input_ids, memory, attention_mask, decoder_attention_mask)
        return linear_cross_entropy(hidden, self.model.lm_head.weight, labels, self.model.logits_bias)


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
        if self.model.logit_softcap is not None:  # capped logits (Gemma 2) are not a plain matmul: unfused
            logits = self.model.logits(hidden)  # (B, T, V)
            return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX)
        return linear_cross_entropy(hidden, self.model.lm_head.weight, targets)


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    device = t.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else t.dtype


def _chunked_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, bias: torch.Tensor | None,
                  grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None) -> torch.Tensor:
    """The mean NLL, chunk by chunk; with `grads` = (d hidden, d weight, d bias or None) buffers, also
    writes the loss's gradients into them (d weight and d bias accumulate, in fp32)."""
    dtype = _compute_dtype(hidden)
    with torch.autocast(hidden.device.type, enabled=False):
        h, w = hidden.to(dtype), weight.to(dtype)  # (N, C), (V, C)
        keep = targets != IGNORE_INDEX  # (N,)
        scale = keep.float() / keep.sum().clamp(min=1)  # (N,): d mean / d nll[n]
        safe = targets.where(keep, 0)[:, None]  # (N, 1)
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        rows = max(1, CHUNK_LOGITS // weight.size(0))
        for s in range(0, h.size(0), rows):
            e = min(s + rows, h.size(0))
            logits = (h[s:e] @ w.t()).float()  # (n, V)
            if bias is not None:
                logits += bias
            target_logit = logits.gather(1, safe[s:e])  # (n, 1)
            row_max = logits.amax(dim=-1, keepdim=True)  # (n, 1)
            unnormalised = logits.sub_(row_max).exp_()  # in place of the logits: one exp per logit
            z = unnormalised.sum(dim=-1, keepdim=True)  # (n, 1)
            loss += ((row_max + z.log() - target_logit).squeeze(1) * scale[s:e]).sum()  # log Z - logit[target]
            if grads is None:
                continue
            grad_h, grad_w, grad_b = grads
            weight_n = scale[s:e, None]  # (n, 1)
            grad_logits = unnormalised.mul_(weight_n / z)  # softmax, scaled
            grad_logits.scatter_add_(1, safe[s:e], -weight_n)  # - one_hot, scaled: d loss / d logits
            if grad_b is not None:
                grad_b += grad_logits.sum(dim=0)
            grad_logits = grad_logits.to(dtype)  # (n, V)
            torch.mm(grad_logits, w, out=grad_h[s:e])
            if dtype == torch.float32:
                grad_w.addmm_(grad_logits.t(), h[s:e])
            else:
                grad_w += (grad_logits.t() @ h[s:e]).float()
    return loss


class _LinearCrossEntropy(torch.autograd.Function):
    """hidden (N, C), weight (V, C), targets (N,), bias (V,) or None -> scalar mean NLL; gradients
    made in the forward."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        grad_h = torch.empty_like(hidden, dtype=_compute_dtype(hidden))  # (N, C)
        grad_w = torch.zeros_like(weight, dtype=torch.float32)  # (V, C)
        grad_b = torch.zeros_like(bias, dtype=torch.float32) if ctx.needs_input_grad[3] else None  # (V,)
        loss = _chunked_loss(hidden, weight, targets, bias, (grad_h, grad_w, grad_b))
        ctx.save_for_backward(grad_h.to(hidden.dtype), grad_w.to(weight.dtype),
                              grad_b.to(bias.dtype) if grad_b is not None else None)
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, torch.Tensor | None]:
        grad_h, grad_w, grad_b = ctx.saved_tensors
        return grad_h * grad, grad_w * grad, None, grad_b * grad if grad_b is not None else None
