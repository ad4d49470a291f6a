"""Recurrent language models: Elman RNN, LSTM and GRU over token embeddings (`lmlab train --arch rnn|lstm|gru`)."""

from lmlab.models.rnn.config import RNNConfig
from lmlab.models.rnn.model import RNNLM

__all__ = ["RNNConfig", "RNNLM"]
