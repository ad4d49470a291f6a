"""Scaling-law fits recover the laws their points were drawn from: Kaplan's exponent, Chinchilla's five
parameters (as Hoffmann et al. fit them), the compute-optimal size at the minimum of its isoFLOP curve, and
bootstrap intervals that hold the truth."""

import math

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.eval.scaling_laws import (
    ChinchillaFit,
    KaplanFit,
    bootstrap,
    compute_optimal,
    fit_chinchilla,
    fit_kaplan,
    fit_power_law,
    isoflop_optimum,
)

CHINCHILLA = ChinchillaFit(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28, objective=0.0)  # their fit
SIZES, TOKENS = [1e6, 3e6, 1e7, 3e7, 1e8, 3e8], [1e8, 3e8, 1e9, 3e9, 1e10]


def grid_points(law=CHINCHILLA) -> tuple[list[float], list[float], list[float]]:
    points = [(n, d, law(n, d)) for n in SIZES for d in TOKENS]
    return [p[0] for p in points], [p[1] for p in points], [p[2] for p in points]


def test_chinchilla_fit_recovers_the_law_its_points_come_from():
    fit = fit_chinchilla(*grid_points(), starts=8)
    for name in ("E", "A", "B", "alpha", "beta"):
        assert getattr(fit, name) == pytest.approx(getattr(CHINCHILLA, name), rel=1e-3), name
    assert fit.objective < 1e-9


def test_kaplan_joint_fit_recovers_its_law_and_its_limits_are_the_one_resource_laws():
    kaplan = KaplanFit(alpha_n=0.076, alpha_d=0.095, n_c=8.8e13, d_c=5.4e13, objective=0.0)  # Kaplan et al.'s
    n, d, loss = grid_points(kaplan)
    fit = fit_kaplan(n, d, loss)
    for name in ("alpha_n", "alpha_d", "n_c", "d_c"):
        assert getattr(fit, name) == pytest.approx(getattr(kaplan, name), rel=1e-3), name
    assert fit(1e9, 1e30) == pytest.approx((fit.n_c / 1e9) ** fit.alpha_n, rel=1e-6)  # data unlimited: L(N)
    assert fit(1e30, 1e9) == pytest.approx((fit.d_c / 1e9) ** fit.alpha_d, rel=1e-6)  # size unlimited: L(D)
    refit = fit_kaplan(n, d, loss, start=fit)  # refitting from the fit stays there
    assert [refit.alpha_n, refit.alpha_d, refit.n_c, refit.d_c] == \
        pytest.approx([fit.alpha_n, fit.alpha_d, fit.n_c, fit.d_c], rel=1e-6)
    with pytest.raises(LmlabError, match="at least 4 runs"):
        fit_kaplan(n[:3], d[:3], loss[:3])


def test_compute_optimal_size_is_the_lowest_loss_on_its_isoflop_curve():
    flops = 1e21
    n_opt, d_opt = compute_optimal(CHINCHILLA, flops)
    assert 6 * n_opt * d_opt == pytest.approx(flops)
    sizes = torch.logspace(7, 12, 5001, dtype=torch.float64).tolist()  # 0.23% apart
    best = min(sizes, key=lambda n: CHINCHILLA(n, flops / (6 * n)))
    assert best == pytest.approx(n_opt, rel=3e-3)


def test_isoflop_profiles_find_the_compute_optimal_size_and_its_exponent():
    """Runs of one compute each, sizes around the optimum: the parabola's vertex is within 2% of the law's
    N_opt, and N_opt(C) across budgets grows as C^(beta / (alpha + beta))."""
    budgets = [1e19, 1e20, 1e21, 1e22]
    optima = []
    for flops in budgets:
        n_opt, _ = compute_optimal(CHINCHILLA, flops)
        sizes = [n_opt * 2.0**k for k in range(-2, 3)]
        optima.append(isoflop_optimum(sizes, [CHINCHILLA(n, flops / (6 * n)) for n in sizes]))
        assert optima[-1] == pytest.approx(n_opt, rel=0.02)
    exponent = fit_power_law(budgets, [1 / n for n in optima]).exponent  # N_opt ~ C^a  <=>  1/N_opt ~ (1/C)^a
    assert exponent == pytest.approx(CHINCHILLA.beta / (CHINCHILLA.alpha + CHINCHILLA.beta), abs=0.01)


def test_an_isoflop_profile_that_does_not_bracket_its_optimum_is_one_error():
    flops = 1e21
    n_opt, _ = compute_optimal(CHINCHILLA, flops)
    sizes = [n_opt * 8.0**k for k in range(1, 4)]  # all larger than the optimum: the loss only rises
    with pytest.raises(LmlabError, match="outside its runs' sizes"):
        isoflop_optimum(sizes, [CHINCHILLA(n, flops / (6 * n)) for n in sizes])


def test_compute_optimal_refuses_a_fit_without_a_minimum():
    with pytest.raises(LmlabError, match="no compute-optimal size"):
        compute_optimal(ChinchillaFit(1.0, 1.0, 1.0, alpha=-0.1, beta=0.3, objective=0.0), 1e20)


def test_power_law_recovers_kaplans_exponent_and_scale():
    sizes = [1e5, 1e6, 1e7, 1e8, 1e9]
    law = fit_power_law(sizes, [(8.8e13 / n) ** 0.076 for n in sizes])
    assert law.exponent == pytest.approx(0.076, rel=1e-9) and law.scale == pytest.approx(8.8e13, rel=1e-6)
    assert law(1e7) == pytest.approx((8.8e13 / 1e7) ** 0.076)


def test_bootstrap_intervals_hold_the_true_exponent():
    generator = torch.Generator().manual_seed(0)
    sizes = torch.logspace(5, 9, 40, dtype=torch.float64).tolist()
    losses = [(8.8e13 / n) ** 0.076 * math.exp(0.02 * float(torch.randn(1, generator=generator))) for n in sizes]
    intervals = bootstrap(lambda rows: {"exponent": fit_power_law([sizes[i] for i in rows],
                                                                  [losses[i] for i in rows]).exponent},
                          len(sizes), samples=200)
    low, high = intervals["exponent"]
    assert low < 0.076 < high and high - low < 0.02


@pytest.mark.parametrize("bad", [[4.0, 3.0, 0.0, 2.0, 1.5], [4.0, 3.0, float("nan"), 2.0, 1.5]])
def test_a_loss_that_is_not_positive_is_one_error(bad):
    with pytest.raises(LmlabError, match="positive finite"):
        fit_chinchilla([1e6, 2e6, 3e6, 4e6, 5e6], [1e9] * 5, bad)


def test_too_few_runs_is_one_error():
    with pytest.raises(LmlabError, match="at least 5 runs"):
        fit_chinchilla([1e6, 2e6], [1e9, 1e9], [3.0, 2.9])
    with pytest.raises(LmlabError, match="two points with different x"):
        fit_power_law([1e6, 1e6], [3.0, 2.9])


def test_a_fit_whose_every_start_fails_is_one_error():
    nowhere = {name: (float("nan"),) for name in ("a", "b", "e", "alpha", "beta")}
    with pytest.raises(LmlabError, match="no start of the Chinchilla fit"):
        fit_chinchilla(*grid_points(), grid=nowhere, starts=1)
