"""Position-wise feed-forward networks: GELU MLP (GPT-2, BERT), SwiGLU (Llama), and the plain and
gated MLPs of the encoder-decoders (ReLU, GELU, SiLU; T5 v1.1 gated GELU)."""

from functools import partial

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


ACTIVATIONS = {
    "relu": F.relu,  # the original Transformer, T5 v1.0
    "gelu": F.gelu,  # BART (exact GELU)
    "gelu_tanh": partial(F.gelu, approximate="tanh"),  # T5 v1.1's gated GELU
    "silu": F.silu,  # Marian
}


class MLP(nn.Module):
    """W_down act(W_up x): the position-wise feed-forward of the encoder-decoder families."""

    def __init__(self, d_model: int, d_ff: int, bias: bool, activation: str):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.activation(self.up(x)))


class GatedMLP(nn.Module):
    """W_down (act(W_gate x) * W_up x): T5 v1.1's gated GELU (SwiGLU's shape with another activation).
    Gate and up share one matmul (stacked, gate first)."""

    def __init__(self, d_model: int, d_ff: int, bias: bool, activation: str):
        super().__init__()
        self.gate_up = nn.Linear(d_model, 2 * d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # (B, T, d_ff) each
        return self.down(self.activation(gate) * up)
