"""RMSNorm as one autograd op with a hand-written backward.

y = w * x * r with r = 1 / sqrt(mean(x^2) + eps) per row. Left to autograd (F.rms_norm on the
CPU is decomposed into pow, mean, add, rsqrt, mul), the backward walks that chain op by op,
with a temporary per step. Written out, the gradient is short:

    dw = sum over rows of g * x * r
    dx = r * (g w) - x * r^3 * mean(g w x)        (the second term removes the part along x)

so the forward keeps x r and r (one number per row) and the backward needs five passes over the
activations. The maths runs in fp32 (or fp64) whatever the input dtype, and the normalised x is rounded
to the input dtype before the weight multiplies it, exactly as `RMSNorm` (and HF's Llama) does.

Without autograd (inference or no_grad) the same forward runs as plain ops: nothing is saved, the
Function's per-call cost goes, and `torch.compile` traces through it without a graph break.
"""

import torch


def _normalise(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x (…, C) -> x r (…, C) in at least fp32, and r = 1 / sqrt(mean(x^2) + eps) (…, 1)."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))  # (…, C)
    rstd = torch.linalg.vecdot(xf, xf).div_(x.size(-1)).add_(eps).rsqrt_().unsqueeze(-1)  # (…, 1)
    return xf * rstd, rstd


class _FusedRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        normed, rstd = _normalise(x, eps)
        ctx.save_for_backward(normed, weight, rstd)
        ctx.input_dtype = x.dtype
        return weight * normed.to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        normed, weight, rstd = ctx.saved_tensors
        dx = dw = None
        if ctx.needs_input_grad[0]:
            g_w = grad.to(normed.dtype) * weight.to(normed.dtype)  # (…, C): the gradient reaching the normalised x
            dot = torch.linalg.vecdot(g_w, normed).unsqueeze(-1)  # (…, 1): sum over features of g w x r
            dx = g_w.addcmul_(normed, dot, value=-1.0 / normed.size(-1)).mul_(rstd).to(ctx.input_dtype)
        if ctx.needs_input_grad[1]:
            rounded = normed.to(ctx.input_dtype)  # what the forward multiplied the weight with
            dw = (grad * rounded).reshape(-1, weight.numel()).sum(0).to(weight.dtype)  # (C,)
        return dx, dw, None


def fused_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2, last dim) + eps), x (…, C), weight (C,); computed in fp32."""
    if not torch.is_grad_enabled():
        return weight * _normalise(x, eps)[0].to(x.dtype)
    return _FusedRMSNorm.apply(x, weight, eps)
