"""The shape of a fixed-window neural LM."""

from dataclasses import dataclass
from typing import Literal

from lmlab.errors import LmlabError


@dataclass(frozen=True)
class WindowConfig:
    vocab_size: int
    window: int = 5  # n: the model reads the last n tokens to predict the next one
    d_model: int = 64  # embedding size
    hidden: int = 256  # width of the tanh hidden layer
    dropout: float = 0.0  # on the concatenated embeddings and on the hidden layer
    tie_embeddings: bool = False  # output layer = embedding matrix (needs hidden == d_model)
    context_length: int = 256  # the window `lmlab eval perplexity` scores in (any length >= 2 * window is exact)
    model_type: Literal["window"] = "window"

    def __post_init__(self):
        for name in ("vocab_size", "window", "d_model", "hidden", "context_length"):
            if getattr(self, name) < 1:
                raise LmlabError(f"{name}={getattr(self, name)} must be at least 1")
        if not 0 <= self.dropout < 1:
            raise LmlabError(f"dropout={self.dropout} must be in [0, 1)")
        if self.tie_embeddings and self.hidden != self.d_model:
            raise LmlabError(f"tied embeddings need hidden == d_model, got hidden={self.hidden} and "
                             f"d_model={self.d_model}; set both to the same size or drop --tie-embeddings")
