"""What `lmlab inspect saliency` computes (`inspect/saliency.py`): its methods and the map it gives back, in a
module without torch, so that the command's parser loads at once."""

import dataclasses
from dataclasses import dataclass

METHODS = ("grad", "grad-x-input", "integrated-gradients")
DEFAULT_STEPS = 128  # Gauss-Legendre points: on SmolLM2-135M gaps of 0.02-0.09% on prose (64 points: up to 0.9%)


@dataclass(frozen=True)
class Saliency:
    """One score per input token for the prediction of `target` (f = log p(target) = `f_x`)."""

    tokens: list[str]
    target: str
    method: str
    scores: list[float]
    f_x: float
    f_baseline: float | None = None  # integrated-gradients: f at the baseline (zero token embeddings)
    completeness_gap: float | None = None  # integrated-gradients: |sum(scores) - (f_x - f_b)| / |f_x - f_b|

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
