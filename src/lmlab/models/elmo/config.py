"""The shape of an ELMo model, checked once where it enters."""

from dataclasses import dataclass, field

from lmlab.config_checks import MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, at_least, at_most, check_types
from lmlab.errors import LmlabError


@dataclass(frozen=True)
class ElmoConfig:
    """Characters -> `char_dim` embeddings -> one convolution per (width, n_filters) in `filters` ->
    max over positions -> `n_highway` highway layers -> a projection to `d_model` (the token layer)
    -> `n_layers` LSTM layers per direction, each with `lstm_cells` cells projected back to
    `d_model` -> a softmax over `vocab_size` words shared by both directions."""

    vocab_size: int
    d_model: int = 64
    lstm_cells: int = 128
    n_layers: int = 2
    char_dim: int = 16
    filters: tuple[tuple[int, int], ...] = field(default=((1, 16), (2, 16), (3, 32), (4, 32), (5, 32)))
    n_highway: int = 2
    max_chars: int = 20  # bytes per word, the begin/end-of-word marks included; longer words are cut

    def __post_init__(self):
        object.__setattr__(self, "filters", tuple(tuple(f) for f in self.filters))
        check_types(self)
        at_least(self, 1, "vocab_size", "d_model", "n_layers", "char_dim")
        at_least(self, 0, "n_highway")
        at_most(self, MAX_VOCAB, "vocab_size")
        at_most(self, MAX_LAYERS, "n_layers", "n_highway")
        at_most(self, MAX_WIDTH, "d_model", "lstm_cells", "char_dim", "max_chars")
        if self.lstm_cells <= self.d_model:
            raise LmlabError(f"ELMo lstm_cells ({self.lstm_cells}) must exceed d_model ({self.d_model}): each "
                             "LSTM projects its cells down to d_model")
        if not self.filters or any(w < 1 or n < 1 for w, n in self.filters):
            raise LmlabError(f"ELMo filters {self.filters} must be (width, count) pairs of positive numbers")
        if self.max_chars < max(w for w, _ in self.filters):
            raise LmlabError(f"max_chars ({self.max_chars}) must be at least the widest filter")

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)


# Named shapes (`lmlab.preset`, `lmlab list --presets`); vocab_size becomes the training data's at training time.
ELMO_PRESETS: dict[str, ElmoConfig] = {
    "elmo-tiny": ElmoConfig(vocab_size=4096),  # `lmlab elmo train` without shape flags
    # Peters et al. (2018): 2048 filters over 50 bytes, 2 x 4096-cell LSTMs projected to 512, the 1B Word vocabulary
    "elmo-original": ElmoConfig(vocab_size=793471, d_model=512, lstm_cells=4096, n_layers=2, char_dim=16,
                                filters=((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)),
                                n_highway=2, max_chars=50),
}
