"""How much T5's span corruption drops (`SpanNoise`), in a module without torch, so that `lmlab train`'s parser
states the defaults at once; the corruption itself is `span_corruption.py`."""

from dataclasses import dataclass

from lmlab.errors import LmlabError


@dataclass(frozen=True)
class SpanNoise:
    """How much span corruption drops: the share of tokens, and the mean length of a span (T5: 0.15, 3)."""

    noise_density: float = 0.15
    mean_span_length: float = 3.0

    def __post_init__(self):
        check_span_noise(self.noise_density, self.mean_span_length)


def check_span_noise(noise_density: float, mean_span_length: float) -> None:
    """One error line unless 0 < noise_density < 1 and mean_span_length >= 1."""
    if not 0 < noise_density < 1:
        raise LmlabError(f"noise_density {noise_density} must be between 0 and 1 (T5 uses 0.15)")
    if mean_span_length < 1:
        raise LmlabError(f"mean_span_length {mean_span_length} must be at least 1 token (T5 uses 3.0)")
