"""The shape of a recurrent LM."""

from dataclasses import dataclass
from typing import Literal

from lmlab.errors import LmlabError
from lmlab.models.checks import check_lm_shape


@dataclass(frozen=True)
class RNNConfig:
    cell: Literal["rnn", "lstm", "gru"]
    vocab_size: int
    d_model: int = 128  # embedding size
    hidden: int = 128  # hidden (and cell) state size of every layer
    n_layers: int = 2
    dropout: float = 0.0  # on the embeddings, between layers and before the output layer
    tie_embeddings: bool = False  # output layer = embedding matrix (needs hidden == d_model)
    context_length: int = 1024  # the window `lmlab eval perplexity` scores in; the state itself is unbounded
    model_type: Literal["rnn"] = "rnn"

    def __post_init__(self):
        if self.cell not in ("rnn", "lstm", "gru"):
            raise LmlabError(f"unknown recurrent cell '{self.cell}'; choose rnn, lstm or gru")
        check_lm_shape(self, ("vocab_size", "d_model", "hidden", "n_layers", "context_length"))
