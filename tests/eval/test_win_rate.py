"""Win-rate arithmetic: ties count half, the interval is scipy's percentile bootstrap on the same draws,
and the length-controlled rate is scikit-learn's logistic regression read at zero length difference."""

import numpy as np
import pytest
from scipy.stats import bootstrap
from sklearn.linear_model import LogisticRegression

from lmlab.eval.win_rate import length_regression, win_rate


def judged(n: int, seed: int = 0):
    """Verdicts of a judge that likes length, with ties, and the two models' reply lengths."""
    rng = np.random.default_rng(seed)
    length_a, length_b = rng.integers(3, 40, n).astype(float), rng.integers(3, 40, n).astype(float)
    verdicts = np.where(rng.random(n) < 1 / (1 + np.exp(-(length_a - length_b) / 8 - 0.4)), 1.0, 0.0)
    verdicts[rng.random(n) < 0.2] = 0.5
    return verdicts, length_a, length_b


@pytest.mark.parity
def test_win_rate_counts_ties_half_and_its_interval_is_scipys_percentile_bootstrap():
    verdicts, length_a, length_b = judged(60)
    result = win_rate(verdicts, length_a, length_b, n_resamples=500, seed=7, confidence=0.9)
    wins, ties, losses = (verdicts == 1).sum(), (verdicts == 0.5).sum(), (verdicts == 0).sum()
    assert (result.n, result.wins, result.ties, result.losses) == (60, wins, ties, losses)
    assert result.win_rate == pytest.approx((wins + ties / 2) / 60)
    scipy_interval = bootstrap((verdicts,), np.mean, n_resamples=500, confidence_level=0.9, method="percentile",
                               rng=np.random.default_rng(7), vectorized=True).confidence_interval
    assert result.interval == pytest.approx((scipy_interval.low, scipy_interval.high), abs=1e-12)


@pytest.mark.parity
def test_the_length_regression_is_sklearns_logistic_regression_with_ties_as_half_weights():
    verdicts, length_a, length_b = judged(80, seed=1)
    d = (length_a - length_b) / np.std(length_a - length_b)
    # a tie is half a win and half a loss: each prompt twice, weighted by the verdict and its complement
    fit = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(
        np.concatenate([d, d])[:, None], np.concatenate([np.ones(80), np.zeros(80)]),
        sample_weight=np.concatenate([verdicts, 1 - verdicts]))
    w0, w1 = length_regression(verdicts, length_a, length_b)
    assert (w0, w1) == pytest.approx((fit.intercept_[0], fit.coef_[0, 0]), abs=1e-5)
    result = win_rate(verdicts, length_a, length_b)
    assert result.length_controlled == pytest.approx(1 / (1 + np.exp(-fit.intercept_[0])), abs=1e-5)
    assert result.length_slope > 0  # this judge likes length


def test_a_model_that_wins_by_length_alone_has_a_length_controlled_rate_near_half():
    rng = np.random.default_rng(2)
    length_a = rng.integers(10, 60, 200).astype(float)
    length_b = length_a + rng.normal(-8, 10, 200)  # A is usually the longer reply
    verdicts = np.where(length_a > length_b, 1.0, 0.0)  # and the judge only likes the longer reply
    result = win_rate(verdicts, length_a, length_b)
    assert result.win_rate > 0.7
    assert abs(result.length_controlled - 0.5) < abs(result.win_rate - 0.5) / 2


def test_at_equal_lengths_the_length_controlled_rate_is_the_win_rate():
    verdicts = np.array([1, 1, 0.5, 0, 1, 0.5, 1, 0])
    result = win_rate(verdicts, np.full(8, 5.0), np.full(8, 5.0))
    assert result.length_controlled == pytest.approx(result.win_rate, abs=1e-7)
    assert result.length_slope == 0 and not result.length_extrapolated


def test_a_rate_at_lengths_never_seen_is_flagged_as_extrapolated():
    verdicts = np.array([1, 1, 0.5, 0, 1, 1])
    assert win_rate(verdicts, np.full(6, 5.0), np.arange(6.0, 12.0)).length_extrapolated  # A always shorter
    assert not win_rate(verdicts, np.full(6, 8.0), np.arange(6.0, 12.0)).length_extrapolated
