"""`NGramLM`: backoff tables behind the `StatefulLM` interface, so n-grams load, score and generate
like every other lmlab model.

It has no parameters. `forward(ids)` returns log-probabilities (B, T, V) as logits (their
log_softmax is themselves; probability 0 is LOG_ZERO); its state is the last n-1 tokens read.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from lmlab.config_checks import MAX_CONTEXT, MAX_VOCAB, at_least, at_most, positive
from lmlab.errors import LmlabError
from lmlab.models.ngram.scoring import next_log_probs, token_log_probs
from lmlab.models.ngram.smoothings import SMOOTHINGS
from lmlab.models.ngram.tables import BackoffTables

# Logits stand for ln 0 with this finite value: -inf would turn masked losses (0 * inf) into NaN, while
# this still makes the perplexity of an impossible token infinite.
LOG_ZERO = torch.finfo(torch.float32).min / 2
MAX_ORDER = 64  # far past any useful n; an order of 10^6 would count every text as one n-gram per token
DEFAULT_CONTEXT_LENGTH = 256  # perplexity windows; any length >= 2(n-1) scores every token with full context


def min_context_length(order: int) -> int:
    """The shortest perplexity window that still gives every token its full n-1 history: 2(n-1), at least 2."""
    return 2 * max(1, order - 1)


@dataclass(frozen=True)
class NGramConfig:
    order: int
    smoothing: str  # a key of SMOOTHINGS
    vocab_size: int
    discounts: tuple[tuple[float, ...], ...] = ()  # per order: (D,) for kn, (D1, D2, D3+) for mkn
    add_k: float | None = None
    context_length: int = DEFAULT_CONTEXT_LENGTH
    model_type: str = "ngram"

    def __post_init__(self):
        if self.order < 1:
            raise LmlabError(f"n-gram order {self.order} must be at least 1")
        at_most(self, MAX_ORDER, "order")
        at_least(self, 1, "vocab_size")
        at_most(self, MAX_VOCAB, "vocab_size")
        at_most(self, MAX_CONTEXT, "context_length")
        positive(self, "add_k")
        if self.smoothing not in SMOOTHINGS:
            raise LmlabError(f"smoothing '{self.smoothing}' is unknown; choose one of {', '.join(SMOOTHINGS)}")
        if self.context_length < min_context_length(self.order):
            raise LmlabError(f"context_length {self.context_length} must be at least {min_context_length(self.order)} "
                             "(2(n-1), and 2) so that perplexity windows give every token its full history")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "NGramConfig":
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise LmlabError(f"n-gram config.json has unknown setting(s) {sorted(unknown)}; was it written by lmlab?")
        return cls(**dict(values, discounts=tuple(tuple(d) for d in values.get("discounts", ()))))


# Named settings (`lmlab.preset`, `lmlab list --presets`); vocab_size becomes the tokenizer's and the
# discounts are fitted on the counts at training time.
NGRAM_PRESETS: dict[str, NGramConfig] = {
    "trigram-kn": NGramConfig(order=3, smoothing="kn", vocab_size=8192),  # `lmlab train --arch ngram`'s default
    "bigram-laplace": NGramConfig(order=2, smoothing="addk", vocab_size=8192, add_k=1.0),
    "5gram-mkn": NGramConfig(order=5, smoothing="mkn", vocab_size=8192),
}


class NGramLM(torch.nn.Module):
    """An n-gram language model (any smoothing) as a StatefulLM."""

    def __init__(self, config: NGramConfig, tables: BackoffTables):
        super().__init__()
        if (tables.order, tables.vocab_size) != (config.order, config.vocab_size):
            raise LmlabError(f"tables of order {tables.order} over {tables.vocab_size} ids do not match the config "
                             f"(order {config.order}, vocab_size {config.vocab_size})")
        self.config = config
        self.tables = tables

    @property
    def normalized(self) -> bool:
        """Whether scores are probabilities (every smoothing but stupid backoff)."""
        return self.config.smoothing != "stupid"

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token log-probabilities (B, T, V) after each position of ids (B, T). Refused for stupid
        backoff: its scores are not a distribution, and a perplexity of them would mean nothing."""
        self._require_normalized()
        logits = torch.from_numpy(next_log_probs(self.tables, ids.cpu().numpy()))  # (B, T, V)
        return logits.clamp_(min=LOG_ZERO).to(ids.device)

    def token_log_probs(self, ids: torch.Tensor | np.ndarray) -> np.ndarray:
        """(B, T) ln P(ids[b, t] | the n-1 tokens before it in the row): fast, no vocabulary-sized arrays.
        For stupid backoff these are log scores, not log-probabilities."""
        ids = ids.cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        return token_log_probs(self.tables, ids)

    def initial_state(self, batch_size: int) -> torch.Tensor:
        """No tokens read yet: an empty (B, 0) history."""
        return torch.zeros(batch_size, 0, dtype=torch.long)

    def reorder_state(self, state: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The histories of the sequences `rows` (R,) of the batch, in that order (beam search's survivors)."""
        return state[rows.to(state.device)]  # (R, S)

    def step(self, ids: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Read ids (B, T) after the history `state`; return the next-token log-scores (B, V) and the
        last n-1 tokens as the new state. For stupid backoff, sampling normalizes the scores."""
        history = torch.cat([state.to(ids.device), ids], dim=1)  # (B, S + T)
        logits = torch.from_numpy(next_log_probs(self.tables, history.cpu().numpy(), last_only=True))  # (B, V)
        logits.clamp_(min=LOG_ZERO)
        keep = min(history.shape[1], self.config.order - 1)
        return logits.to(ids.device), history[:, history.shape[1] - keep:]

    def _require_normalized(self) -> None:
        if not self.normalized:
            raise LmlabError("stupid backoff gives scores, not probabilities, so it has no perplexity; "
                             "train with --smoothing kn or mkn to measure one")
