"""The Elman (vanilla) RNN cell: h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh).

Its gradient through time is a product of W_hh^T diag(tanh') factors, one per step, so it
shrinks (or grows) geometrically: the vanishing-gradient problem LSTMs and GRUs address.
"""

import math

import torch
from torch import nn


class ElmanCell(nn.Module):
    """One step of an Elman RNN; parameters named and shaped as in `torch.nn.RNN` (tanh)."""

    n_gates = 1

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size))  # (H, I)
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))  # (H, H)
        self.bias_ih = nn.Parameter(torch.empty(hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(hidden_size))
        reset_uniform(self)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        """x (B, I), state (h (B, H),) -> the next state (h (B, H),)."""
        (h,) = state
        return (torch.tanh(x @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh),)


def reset_uniform(cell: nn.Module) -> None:
    """torch's RNN initialisation: every parameter uniform in [-1/sqrt(H), 1/sqrt(H)]."""
    bound = 1 / math.sqrt(cell.hidden_size)
    for p in cell.parameters():
        nn.init.uniform_(p, -bound, bound)
