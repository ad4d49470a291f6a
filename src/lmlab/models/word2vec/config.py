"""The settings of a word2vec run, checked once where they enter."""

from dataclasses import dataclass
from typing import Literal

from lmlab.config_checks import MAX_BATCH, MAX_SEED, MAX_WIDTH, at_least, at_most, check_types, positive
from lmlab.errors import LmlabError

DEFAULT_LR = {"sgns": 0.025, "cbow": 0.05}  # the original tool's starting rates


@dataclass(frozen=True)
class Word2VecConfig:
    """Skip-gram (`sgns`: a word predicts each neighbour) or CBOW (`cbow`: the mean of the neighbours
    predicts the word), both with negative sampling. `lr` starts at DEFAULT_LR[method] unless set, and
    decays linearly to 1e-4 of itself over the run; `subsample` is the threshold t (0 turns it off)."""

    method: Literal["sgns", "cbow"] = "sgns"
    dim: int = 100
    window: int = 5
    negatives: int = 5
    min_count: int = 5
    subsample: float = 1e-3
    epochs: int = 5
    lr: float | None = None
    batch_size: int = 1024  # examples per step of the batched torch path (the C++ loop takes one at a time)
    seed: int = 0

    def __post_init__(self):
        if self.method not in DEFAULT_LR:
            raise LmlabError(f"unknown word2vec method '{self.method}'; choose sgns or cbow")
        check_types(self)
        at_least(self, 1, "dim", "window", "negatives", "min_count", "epochs", "batch_size")
        at_least(self, 0, "seed")
        at_most(self, MAX_WIDTH, "dim", "window", "negatives")
        at_most(self, MAX_BATCH, "batch_size")
        at_most(self, MAX_SEED, "seed")
        if self.subsample < 0:
            raise LmlabError(f"--subsample must be 0 (off) or a positive threshold like 1e-3, got {self.subsample}")
        positive(self, "lr")

    @property
    def start_lr(self) -> float:
        return DEFAULT_LR[self.method] if self.lr is None else self.lr


# Named settings (`lmlab.preset`, `lmlab list --presets`): `lmlab word2vec train`'s defaults, per method.
WORD2VEC_PRESETS: dict[str, Word2VecConfig] = {
    "word2vec-sgns": Word2VecConfig(method="sgns"),
    "word2vec-cbow": Word2VecConfig(method="cbow"),
}
