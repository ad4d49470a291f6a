"""The settings of a word2vec run, checked once where they enter."""

from dataclasses import dataclass
from typing import Literal

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
    batch_size: int = 1024
    seed: int = 0

    def __post_init__(self):
        if self.method not in DEFAULT_LR:
            raise LmlabError(f"unknown word2vec method '{self.method}'; choose sgns or cbow")
        for name in ("dim", "window", "negatives", "min_count", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise LmlabError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.subsample < 0:
            raise LmlabError(f"--subsample must be 0 (off) or a positive threshold like 1e-3, got {self.subsample}")
        if self.lr is not None and self.lr <= 0:
            raise LmlabError(f"--lr must be positive, got {self.lr}")

    @property
    def start_lr(self) -> float:
        return DEFAULT_LR[self.method] if self.lr is None else self.lr
