"""Position-wise feed-forward networks: GELU MLP (GPT-2, BERT) and SwiGLU (Llama)."""

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.modules.fused_swiglu import fused_swiglu


class GeluMLP(nn.Module):
    """W2 gelu(W1 x + b1) + b2. GPT-2 uses the tanh approximation of GELU."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = True, approximate: str = "tanh"):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x), approximate=self.approximate))


class SwiGLU(nn.Module):
    """W_down (silu(W_gate x) * W_up x). Gate and up share one matmul (stacked, gate first); the
    gated product is one autograd op (fused_swiglu.py)."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        self.gate_up = nn.Linear(d_model, 2 * d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(fused_swiglu(self.gate_up(x)))  # (B, T, 2 d_ff) -> (B, T, d_ff) -> (B, T, C)
