"""Recurrent language models: Elman RNN, LSTM and GRU over token embeddings (`lmlab train --arch rnn|lstm|gru`)."""

from importlib import import_module

# name -> the module it lives in: imported on first use, so that `lmlab.models.rnn.config` (what the CLI's
# parsers read) loads without torch
_EXPORTS = {"RNNConfig": "lmlab.models.rnn.config", "RNNLM": "lmlab.models.rnn.model"}

__all__ = ["RNNConfig", "RNNLM"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lmlab.models.rnn' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
