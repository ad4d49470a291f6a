"""The shape of a fixed-window neural LM."""

from dataclasses import dataclass
from typing import Literal

from lmlab.models.checks import check_lm_shape


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
        check_lm_shape(self, ("vocab_size", "window", "d_model", "hidden", "context_length"))


# Named shapes (`lmlab.preset`, `lmlab list --presets`); vocab_size becomes the tokenizer's at training time.
WINDOW_PRESETS: dict[str, WindowConfig] = {
    "window-small": WindowConfig(vocab_size=4096),  # `lmlab train --arch window` without size flags
    "window-tiny": WindowConfig(vocab_size=4096, window=3, d_model=32, hidden=64),
}
