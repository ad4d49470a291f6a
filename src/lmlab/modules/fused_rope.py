"""Rotary embeddings as one autograd op, applied to the queries and keys of all heads at once.

`apply_rotary` in positions.py writes RoPE as autograd sees it: split x in halves, build
rotate_half(x) = [-x2, x1] with a negation and a concatenation, then x * cos + rotate_half(x) * sin.
That is five full-size temporaries in the forward pass and as many in the backward, per tensor.

Here the two halves of the output are written straight into one buffer,

    out1 = x1 cos - x2 sin        out2 = x2 cos + x1 sin

with a multiply and a fused multiply-add each (no negation, no concatenation). A rotation is
orthogonal, so the backward pass is the same rotation by the negative angle (sin -> -sin) applied
to the incoming gradient: nothing is saved but the cos/sin tables. Called once on the query and
key heads stacked together, it replaces the two `apply_rotary` calls of a training step. Without
autograd (inference or no_grad) the rotation runs directly: no Function, so `torch.compile` traces it.
"""

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    """x (…, D) rotated by +angle (sign 1) or -angle (sign -1); cos, sin: the first halves (…, D/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    dtype = torch.promote_types(x.dtype, cos.dtype)  # fp32 tables: fp32 maths
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    out1, out2 = out.chunk(2, dim=-1)
    torch.mul(x1, cos, out=out1).addcmul_(x2, sin, value=-sign)  # x1 cos - x2 sin
    torch.mul(x2, cos, out=out2).addcmul_(x1, sin, value=sign)  # x2 cos + x1 sin
    return out.to(x.dtype)


def _rotate_direct(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`_rotate` by +angle with the halves joined by a concatenation: the same ops and bits, but no
    writes into slices of a buffer (`out=` a strided view), which torch.compile cannot trace."""
    x1, x2 = x.chunk(2, dim=-1)
    out = torch.cat([(x1 * cos).addcmul_(x2, sin, value=-1.0), (x2 * cos).addcmul_(x1, sin, value=1.0)], dim=-1)
    return out.to(x.dtype)


class _FusedRotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin, 1.0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return _rotate(grad, cos, sin, -1.0), None, None


def fused_rotary(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate x (B, H, T, D) by the angles in `rope` = (cos, sin) from `RotaryEmbedding`; the same
    result as `apply_rotary`, in fewer passes over memory. x may be a strided view (e.g. the query
    and key heads of a fused qkv projection); the result is contiguous (B, H, T, D)."""
    cos, sin = rope
    half = x.size(-1) // 2
    # the tables repeat their first half (pairs i and i + D/2 share an angle): read one copy
    if not torch.is_grad_enabled():
        return _rotate_direct(x, cos[..., :half], sin[..., :half])
    return _FusedRotary.apply(x, cos[..., :half], sin[..., :half])
