"""Recurrent language models: Elman RNN, LSTM and GRU over token embeddings (`lmlab train --arch rnn|lstm|gru`)."""

from lmlab.lazy import lazy_exports

# name -> the module it lives in: imported on first use, so that `lmlab.models.rnn.config` (what the CLI's
# parsers read) loads without torch
_EXPORTS = {"RNNConfig": "lmlab.models.rnn.config", "RNNLM": "lmlab.models.rnn.model"}

__all__ = ["RNNConfig", "RNNLM"]
__getattr__ = lazy_exports(__name__, _EXPORTS)
