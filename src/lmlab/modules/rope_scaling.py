"""RoPE beyond the context a model was trained for: the frequencies of scaled rotary positions.

Rotary positions turn feature pair i by position * f_i, f_i = base^(-2i/D). A model trained on C tokens has
seen every angle of the fast pairs but only part of a turn of the slow ones; stretching the context to
factor * C changes the slow frequencies (whose angles would leave what training covered) and keeps the fast:
  linear  every f_i / factor (position interpolation);
  llama3  wavelengths 2 pi / f_i longer than C / low_freq_factor are divided by factor, shorter than
          C / high_freq_factor are kept, and those between blend the two linearly in C / wavelength (Llama 3.1);
  yarn    NTK-by-parts: pairs turning fewer than beta_slow times over C are interpolated, more than beta_fast
          times kept, a linear ramp between; cos and sin are multiplied by an attention factor, by default
          0.1 ln(factor) + 1, which sharpens the softmax as the context grows (YaRN).
"""

import math
from dataclasses import dataclass
from typing import Literal

import torch


@dataclass(frozen=True)
class RopeScaling:
    kind: Literal["linear", "llama3", "yarn"]
    factor: float  # how many times the trained context the scaled RoPE reaches
    original_context: int | None = None  # llama3, yarn: the context the unscaled model was trained for
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    attention_factor: float | None = None  # yarn: None = 0.1 ln(factor) + 1


def scaled_frequencies(inv_freq: torch.Tensor, head_dim: int, base: float,
                       scaling: RopeScaling) -> tuple[torch.Tensor, float]:
    """The frequencies (D/2,) of `inv_freq` under `scaling`, and the factor cos and sin are multiplied by."""
    if scaling.kind == "linear":
        return inv_freq / scaling.factor, 1.0
    if scaling.kind == "llama3":
        return _llama3(inv_freq, scaling), 1.0
    return _yarn(inv_freq, head_dim, base, scaling)


def _llama3(inv_freq: torch.Tensor, s: RopeScaling) -> torch.Tensor:
    wavelength = 2 * math.pi / inv_freq  # (D/2,)
    long, short = s.original_context / s.low_freq_factor, s.original_context / s.high_freq_factor
    scaled = torch.where(wavelength > long, inv_freq / s.factor, inv_freq)
    blend = (s.original_context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - blend) * scaled / s.factor + blend * scaled
    between = (wavelength >= short) & (wavelength <= long)
    return torch.where(between, blended, scaled)


def _yarn(inv_freq: torch.Tensor, head_dim: int, base: float, s: RopeScaling) -> tuple[torch.Tensor, float]:
    def dimension(rotations: float) -> float:  # the feature index whose pair turns `rotations` times over the context
        return head_dim * math.log(s.original_context / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(dimension(s.beta_fast)), 0)
    high = min(math.ceil(dimension(s.beta_slow)), head_dim - 1)
    pairs = torch.arange(head_dim // 2, dtype=torch.float32, device=inv_freq.device)  # (D/2,)
    ramp = ((pairs - low) / max(high - low, 0.001)).clamp(0, 1)
    kept = 1 - ramp  # 1 for the fast pairs (extrapolated as they are), 0 for the slow (interpolated)
    mixed = inv_freq / s.factor * (1 - kept) + inv_freq * kept
    attention = s.attention_factor
    if attention is None:
        attention = 0.1 * math.log(s.factor) + 1.0 if s.factor > 1 else 1.0
    return mixed, attention
