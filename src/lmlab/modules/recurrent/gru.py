"""The GRU cell (Cho et al. 2014), in torch's convention:

    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)              reset gate
    z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)              update gate
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn))           candidate
    h_t = (1 - z) * n + z * h_{t-1}

Like the LSTM's cell, h_t keeps a gated copy of h_{t-1}, so gradients need not vanish.
"""

import torch
from torch import nn

from lmlab.modules.recurrent.elman import reset_uniform


class GRUCell(nn.Module):
    """One step of a GRU; parameters named and shaped as in `torch.nn.GRU` (gates r, z, n)."""

    n_gates = 3

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(3 * hidden_size, input_size))  # (3H, I)
        self.weight_hh = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))  # (3H, H)
        self.bias_ih = nn.Parameter(torch.empty(3 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(3 * hidden_size))
        reset_uniform(self)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        """x (B, I), state (h (B, H),) -> the next state (h (B, H),)."""
        (h,) = state
        x_r, x_z, x_n = (x @ self.weight_ih.T + self.bias_ih).chunk(3, dim=-1)  # each (B, H)
        h_r, h_z, h_n = (h @ self.weight_hh.T + self.bias_hh).chunk(3, dim=-1)  # each (B, H)
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        return ((1 - z) * n + z * h,)
