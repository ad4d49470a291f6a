"""The gated unit of SwiGLU, silu(gate) * up, as one autograd op on the stacked gate|up tensor.

Left to autograd, `gate, up = h.chunk(2); silu(gate) * up` keeps silu(gate) for the backward and
ends it by concatenating the two gradients into a new (…, 2 d_ff) tensor. Here the backward writes
both gradients straight into their halves of one buffer,

    d gate = g silu'(gate) up        (torch's own silu backward kernel, then a multiply in place)
    d up   = g silu(gate)

three passes and no temporary, where autograd makes four passes and four d_ff-wide temporaries.
Without autograd (inference or no_grad) the forward runs as plain ops, which `torch.compile` traces.
"""

import torch
import torch.nn.functional as F


def _gated(gate_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """silu(gate) * up (…, d_ff), and silu(gate) (…, d_ff), for gate_up (…, 2 d_ff)."""
    gate, up = gate_up.chunk(2, dim=-1)  # (…, d_ff) each
    activated = F.silu(gate)
    return activated * up, activated


class _FusedSwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate_up: torch.Tensor) -> torch.Tensor:
        out, activated = _gated(gate_up)
        ctx.save_for_backward(gate_up, activated)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        gate_up, activated = ctx.saved_tensors
        gate, up = gate_up.chunk(2, dim=-1)
        grad_gate_up = torch.empty(gate_up.shape, dtype=gate_up.dtype, device=gate_up.device)
        d_gate, d_up = grad_gate_up.chunk(2, dim=-1)
        torch.ops.aten.silu_backward.grad_input(grad, gate, grad_input=d_gate).mul_(up)  # g silu'(gate) up
        torch.mul(grad, activated, out=d_up)
        return grad_gate_up


def fused_swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gate_up (…, 2 d_ff) = [gate | up] -> (…, d_ff)."""
    if not torch.is_grad_enabled():
        return _gated(gate_up)[0]
    return _FusedSwiGLU.apply(gate_up)
