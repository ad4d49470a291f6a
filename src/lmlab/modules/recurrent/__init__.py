"""Recurrent cells written out equation by equation (Elman RNN, LSTM, GRU), and a multi-layer
unroll over them. They use torch's parameter layout, so each equals its fused torch module."""

from lmlab.modules.recurrent.elman import ElmanCell
from lmlab.modules.recurrent.gru import GRUCell
from lmlab.modules.recurrent.lstm import LSTMCell
from lmlab.modules.recurrent.stack import CELLS, CellStack, FusedStack

__all__ = ["CELLS", "CellStack", "ElmanCell", "FusedStack", "GRUCell", "LSTMCell"]
