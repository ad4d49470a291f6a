"""Axis ticks and the numbers on them: round tick positions on linear and log10 axes, short labels
(1.2k, 0.01, 2e-5) with as few digits as keep them distinct, and an axis range padded to clear the frame.
"""

import math

import numpy as np


def format_number(value: float, digits: int = 3) -> str:
    """Short label for a tick: 1.2k, 3.5M, 250, 0.01, 2e-5."""
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= size:
            return f"{value / size:.{digits}g}{suffix}"
    if magnitude >= 1e-3:
        return f"{value:.{digits}g}"
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def tick_labels(ticks: list[float]) -> list[str]:
    """Format ticks with the fewest significant digits (3 or more) that keeps labels distinct."""
    for digits in range(3, 10):
        labels = [format_number(t, digits) for t in ticks]
        if len(set(labels)) == len(labels):
            return labels
    return labels


def linear_ticks(lo: float, hi: float, target: int) -> list[float]:
    """About `target` round ticks in [lo, hi], spaced 1, 2, 2.5 or 5 times a power of ten."""
    raw = (hi - lo) / max(target, 1)
    power = 10 ** math.floor(math.log10(raw))
    steps = [m * power for m in (10, 5, 2.5, 2, 1)]
    step = min(steps, key=lambda st: abs((hi - lo) / st - target))  # ties go to the larger step
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def log_ticks(lo: float, hi: float, target: int) -> list[float]:
    """Ticks for a log10 axis spanning exponents [lo, hi], returned as log10 positions.

    Under a decade round linear values are used; up to three decades add 2 and 5 between powers
    of ten; wider spans label every k-th power of ten.
    """
    if hi - lo < 1:
        ticks = linear_ticks(10**lo, 10**hi, target)
        return [math.log10(t) for t in ticks if t > 0]
    if hi - lo <= 3:
        multiples, every = (1, 2, 5), 1
    else:
        multiples, every = (1,), math.ceil((hi - lo) / target)
    positions = [
        e + math.log10(m)
        for e in range(math.floor(lo), math.ceil(hi) + 1)
        if e % every == 0
        for m in multiples
    ]
    return [p for p in positions if lo - 1e-9 <= p <= hi + 1e-9]


def axis_ticks(lo: float, hi: float, target: int, log: bool) -> tuple[list[float], list[str]]:
    """About `target` ticks for an axis over [lo, hi] (log10 positions on a log axis) and their labels."""
    if log:
        ticks = log_ticks(lo, hi, target)
        return ticks, tick_labels([10**t for t in ticks])
    ticks = linear_ticks(lo, hi, target)
    return ticks, tick_labels(ticks)


def padded_range(values: np.ndarray, fallback: tuple[float, float]) -> tuple[float, float]:
    """Data range widened by 4% each side (by 1 around a constant) so lines clear the frame."""
    if values.size == 0:
        return fallback
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        return lo - 1, hi + 1
    pad = 0.04 * (hi - lo)
    return lo - pad, hi + pad
