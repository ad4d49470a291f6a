"""The shape of a recurrent LM."""

from dataclasses import dataclass
from typing import Literal

from lmlab.errors import LmlabError


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
        for name in ("vocab_size", "d_model", "hidden", "n_layers", "context_length"):
            if getattr(self, name) < 1:
                raise LmlabError(f"{name}={getattr(self, name)} must be at least 1")
        if not 0 <= self.dropout < 1:
            raise LmlabError(f"dropout={self.dropout} must be in [0, 1)")
        if self.tie_embeddings and self.hidden != self.d_model:
            raise LmlabError(f"tied embeddings need hidden == d_model, got hidden={self.hidden} and "
                             f"d_model={self.d_model}; set both to the same size or drop --tie-embeddings")
