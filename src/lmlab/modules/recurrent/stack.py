"""Layers of recurrent cells unrolled over a sequence, with one state format for both versions:
a tuple of (n_layers, B, H) tensors, (h,) for RNN and GRU, (h, c) for LSTM.

`CellStack` unrolls the cells of this package step by step in Python: the equations, readable.
`FusedStack` runs `torch.nn.RNN / LSTM / GRU` (one fused kernel per layer, cuDNN on a GPU) with
the same parameters; tests/models/test_rnn_lm.py shows the two compute the same function.
"""

import torch
from torch import nn

from lmlab.modules.recurrent.elman import ElmanCell
from lmlab.modules.recurrent.gru import GRUCell
from lmlab.modules.recurrent.lstm import LSTMCell

CELLS = {"rnn": ElmanCell, "lstm": LSTMCell, "gru": GRUCell}
_FUSED = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}
PARAMETER_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def zero_state(cell: str, n_layers: int, batch_size: int, hidden_size: int, device=None) -> tuple[torch.Tensor, ...]:
    """The state before the first token: zeros, (h,) or (h, c), each (n_layers, B, H)."""
    n_parts = 2 if cell == "lstm" else 1
    return tuple(torch.zeros(n_layers, batch_size, hidden_size, device=device) for _ in range(n_parts))


class FusedStack(nn.Module):
    """`n_layers` recurrent layers as one fused torch module; dropout between layers when training."""

    def __init__(self, cell: str, input_size: int, hidden_size: int, n_layers: int, dropout: float = 0.0):
        super().__init__()
        self.cell = cell
        self.rnn = _FUSED[cell](input_size, hidden_size, n_layers, batch_first=True,
                                dropout=dropout if n_layers > 1 else 0.0)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """x (B, T, I), state -> outputs of the top layer (B, T, H), the state after the last step."""
        if self.cell == "lstm":
            out, (h, c) = self.rnn(x, state)
            return out, (h, c)
        out, h = self.rnn(x, state[0])
        return out, (h,)


class CellStack(nn.Module):
    """`n_layers` cells unrolled one time step at a time: what `FusedStack` computes, spelled out."""

    def __init__(self, cell: str, input_size: int, hidden_size: int, n_layers: int, dropout: float = 0.0):
        super().__init__()
        self.cells = nn.ModuleList(CELLS[cell](input_size if k == 0 else hidden_size, hidden_size)
                                   for k in range(n_layers))
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_fused(cls, fused: FusedStack) -> "CellStack":
        """A CellStack holding copies of `fused`'s weights (torch names them weight_ih_l0, …)."""
        rnn = fused.rnn
        stack = cls(fused.cell, rnn.input_size, rnn.hidden_size, rnn.num_layers, rnn.dropout)
        with torch.no_grad():
            for k, cell in enumerate(stack.cells):
                for name in PARAMETER_NAMES:
                    getattr(cell, name).copy_(getattr(rnn, f"{name}_l{k}"))
        return stack

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """x (B, T, I), state -> outputs of the top layer (B, T, H), the state after the last step."""
        finals = []
        for k, cell in enumerate(self.cells):
            layer_state = tuple(part[k] for part in state)  # each (B, H)
            outputs = []
            for t in range(x.shape[1]):
                layer_state = cell(x[:, t], layer_state)
                outputs.append(layer_state[0])
            x = torch.stack(outputs, dim=1)  # (B, T, H)
            if k < len(self.cells) - 1:
                x = self.dropout(x)
            finals.append(layer_state)
        return x, tuple(torch.stack(parts) for parts in zip(*finals))  # each (n_layers, B, H)
