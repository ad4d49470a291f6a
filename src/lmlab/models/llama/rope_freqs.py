"""Llama 3.1's scaled RoPE in GGUF: llama.cpp's converter writes no rope.scaling keys for it, only the tensor
`rope_freqs` of one factor per rotated pair (frequency f_i is used as f_i / factor_i), computed from
config.json's llama3 parameters. lmlab's llama3 scaling (`modules/rope_scaling.py`) takes the parameters, so
reading a file finds parameters that give its factors (`llama3_settings`) and checks that they give every
one of them; factors no llama3 parameters give are refused.

The factors are 1 for the fast pairs (wavelength below C / high), `factor` for the slow ones (above C / low)
and 1 / ((1 - s) / factor + s) between, s linear in 1 / wavelength. Only the two wavelengths C / low and
C / high matter, so C is taken as the longer one rounded (low then comes out 1, as in every Llama 3.x).
"""

import math

import torch

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.modules.rope_scaling import RopeScaling, scaled_frequencies

ROPE_FREQS = "rope_freqs.weight"
TOLERANCE = 1e-5  # relative: the file's factors are fp32 numbers; other parameters differ by far more


def llama3_factors(cfg: ModelConfig) -> torch.Tensor:
    """The (head_dim / 2,) factors llama.cpp's converter writes as `rope_freqs` for llama3-scaled `cfg`."""
    return _factors(cfg.head_dim, cfg.rope_base, RopeScaling(
        "llama3", cfg.rope_factor, cfg.rope_original_context, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor))


def _factors(head_dim: int, base: float, scaling: RopeScaling) -> torch.Tensor:
    inv_freq = base ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (D/2,)
    scaled, _ = scaled_frequencies(inv_freq, head_dim, base, scaling)
    return (inv_freq / scaled).float()


def llama3_settings(factors: torch.Tensor, head_dim: int, base: float) -> dict:
    """Our rope_scaling fields for the `rope_freqs` `factors` of a model with heads of `head_dim` rotated at
    RoPE base `base`: none when every factor is 1, else llama3 parameters that give each factor."""
    factors = factors.double().flatten()
    if not torch.isfinite(factors).all() or (factors < 1 - TOLERANCE).any():
        raise LmlabError(f"GGUF tensor '{ROPE_FREQS}' holds factors below 1 or not finite; the file is damaged, "
                         "download it again")
    if (factors - 1).abs().max() <= TOLERANCE:
        return {}
    inverse_wavelength = base ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim) / (2 * math.pi)
    factor = factors.max().item()
    blend = (1 / factors - 1 / factor) / (1 - 1 / factor)  # s: 1 where kept, 0 where divided by the factor
    kept, whole = blend >= 1 - TOLERANCE, blend <= TOLERANCE
    u, s = inverse_wavelength[~kept & ~whole], blend[~kept & ~whole]
    slow = inverse_wavelength[whole].max().item()  # the long-wavelength end: 1 / C lies above it
    fast = inverse_wavelength[kept].min().item() if kept.any() else 2 * inverse_wavelength.max().item()
    if len(u) >= 2:  # s = (u - 1/C_low) / (1/C_high - 1/C_low): the line through the outer two
        slope = ((s[-1] - s[0]) / (u[-1] - u[0])).item()
        low_u, high_u = (u[0] - s[0] / slope).item(), (u[0] + (1 - s[0]) / slope).item()
    elif len(u) == 1:  # one point: put the fast end halfway to the next kept pair
        high_u = (u.item() + fast) / 2
        low_u = (u.item() - s.item() * high_u) / (1 - s.item())
    else:  # no pair between: both ends between the scaled and the kept pairs
        low_u, high_u = slow + (fast - slow) / 3, slow + 2 * (fast - slow) / 3
    if not 0 < low_u < high_u:
        raise _unmatched()
    context = max(1, round(1 / low_u))
    settings = {"rope_scaling": "llama3", "rope_factor": float(f"{factor:.7g}"), "rope_original_context": context,
                "rope_low_freq_factor": float(f"{context * low_u:.7g}"),
                "rope_high_freq_factor": float(f"{context * high_u:.7g}")}
    ours = _factors(head_dim, base, RopeScaling("llama3", settings["rope_factor"], context,
                                                settings["rope_low_freq_factor"], settings["rope_high_freq_factor"]))
    if not torch.allclose(ours.double(), factors, rtol=TOLERANCE, atol=0):
        raise _unmatched()
    return settings


def _unmatched() -> LmlabError:
    return LmlabError(f"GGUF tensor '{ROPE_FREQS}' holds RoPE factors that no llama3 scaling gives; lmlab computes "
                      "Llama 3.1's scaling only, so this model is not supported yet")
