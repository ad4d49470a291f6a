"""The LSTM cell (Hochreiter & Schmidhuber 1997, with a forget gate):

    i, f, g, o = split(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)    (gates in this order, as in torch)
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
    h_t = sigmoid(o) * tanh(c_t)

The cell state c is updated additively: its gradient through time is scaled by the forget gate
only, so it can survive many steps when the gate stays near 1.
"""

import torch
from torch import nn

from lmlab.modules.recurrent.elman import reset_uniform


class LSTMCell(nn.Module):
    """One step of an LSTM; parameters named and shaped as in `torch.nn.LSTM`."""

    n_gates = 4

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))  # (4H, I)
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))  # (4H, H)
        self.bias_ih = nn.Parameter(torch.empty(4 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(4 * hidden_size))
        reset_uniform(self)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, I), state (h, c), each (B, H) -> the next (h, c)."""
        h, c = state
        gates = x @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh  # (B, 4H)
        i, f, g, o = gates.chunk(4, dim=-1)  # each (B, H)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c
