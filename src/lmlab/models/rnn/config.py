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


# Named shapes (`lmlab.preset`, `lmlab list --presets`); vocab_size becomes the tokenizer's at training time.
# The -small ones are `lmlab train --arch rnn|lstm|gru` without size flags.
RNN_PRESETS: dict[str, RNNConfig] = {
    "rnn-small": RNNConfig(cell="rnn", vocab_size=4096),
    "lstm-small": RNNConfig(cell="lstm", vocab_size=4096),
    "gru-small": RNNConfig(cell="gru", vocab_size=4096),
    # the medium LSTM of Zaremba et al. (2014) on the Penn Treebank: 2 x 650 units, dropout 0.5
    "lstm-medium": RNNConfig(cell="lstm", vocab_size=10000, d_model=650, hidden=650, n_layers=2, dropout=0.5),
}
