"""Confidence intervals for the shares and means an evaluation reports.

A share of n yes/no outcomes (the questions answered right, the pairs where the model prefers the
stereotype) gets Wilson's score interval, which stays inside [0, 1] and is sensible at 0 or n
successes and small n, where the normal approximation is not. A mean of values in [0, 1] that are
not yes/no (TruthfulQA's MC2 probability mass) gets a percentile bootstrap interval, resampled with a
fixed seed so a rerun prints the same interval.
"""

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from lmlab.errors import LmlabError


def z_of(level: float) -> float:
    """The standard normal quantile for a two-sided interval of `level` (0.95 -> 1.96)."""
    if not 0 < level < 1:
        raise LmlabError(f"a confidence level must lie strictly between 0 and 1, got {level}")
    return NormalDist().inv_cdf(0.5 + level / 2)


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval (low, high) for the share successes / n; (0, 1) for n = 0."""
    if not 0 <= successes <= n:
        raise LmlabError(f"{successes} successes out of {n} trials is not a share")
    if n == 0:
        return 0.0, 1.0
    z = z_of(level)
    share = successes / n
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return min(share, max(0.0, centre - half)), max(share, min(1.0, centre + half))  # holds the share despite rounding


def bootstrap_interval(values: Sequence[float], level: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval (low, high) of the mean of `values`: `resamples` means of
    len(values) values drawn with replacement, cut at the (1 - level) / 2 quantiles."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise LmlabError("a bootstrap interval needs at least one value")
    z_of(level)  # checks the level
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)  # (resamples,)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    mean = float(data.mean())
    return min(float(low), mean), max(float(high), mean)  # holds the mean despite rounding
