"""Scaling-law fits: Kaplan et al.'s power laws and Chinchilla's L(N, D), from (parameters, tokens, loss) points.

Kaplan et al. (2020) fit the loss of models trained to convergence as a power law of one resource at a time:
L(N) = (N_c / N)^alpha_N, L(D) = (D_c / D)^alpha_D, a straight line in log-log space (`fit_power_law`), and both
at once as L(N, D) = ((N_c / N)^(alpha_N / alpha_D) + D_c / D)^alpha_D, whose limits are those two laws
(`fit_kaplan`; it has no irreducible loss).
Hoffmann et al. (2022, "Chinchilla", approach 3) fit both at once with an irreducible loss E:

    L(N, D) = E + A / N^alpha + B / D^beta

minimising the Huber loss (delta 1e-3) of log L's residuals, written with a log-sum-exp so that every term
stays positive, by L-BFGS from a grid of starting points (`fit_chinchilla`). With training compute C = 6 N D,
the loss is lowest at N_opt = G (C / 6)^(beta / (alpha + beta)), G = (alpha A / (beta B))^(1 / (alpha + beta)),
and D_opt = C / (6 N_opt) (`compute_optimal`); measured instead, it is the vertex of a parabola through
the losses of one compute budget against log N (`isoflop_optimum`, their approach 2), and N_opt(C) across
budgets is a power law again. `bootstrap` resamples the points to give the exponents an interval. Everything runs
in float64 on the CPU; the points are few (one per training run).
"""

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from lmlab.errors import LmlabError

HUBER_DELTA = 1e-3  # Hoffmann et al.'s
# Hoffmann et al.'s grid of starting points, on a, b = log A, log B and e = log E
_GRID = {"alpha": (0.0, 0.5, 1.0, 1.5, 2.0), "beta": (0.0, 0.5, 1.0, 1.5, 2.0), "e": (-1.0, -0.5, 0.0, 0.5, 1.0),
         "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0), "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)}


@dataclass(frozen=True)
class PowerLaw:
    """L(x) = (scale / x)^exponent."""
    exponent: float
    scale: float

    def __call__(self, x: float) -> float:
        return (self.scale / x) ** self.exponent


@dataclass(frozen=True)
class ChinchillaFit:
    """L(N, D) = E + A / N^alpha + B / D^beta, and the Huber objective it reached."""
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float

    def __call__(self, n: float, d: float) -> float:
        return self.E + self.A / n**self.alpha + self.B / d**self.beta


def fit_power_law(x: list[float], loss: list[float]) -> PowerLaw:
    """Kaplan's L(x) = (scale / x)^exponent by least squares on log L = exponent (log scale - log x)."""
    log_x, log_l = _positive_logs(x, "x"), _positive_logs(loss, "loss")
    if len(log_x) != len(log_l) or len(log_x) < 2 or float(log_x.std()) == 0:
        raise LmlabError("a power law needs at least two points with different x")
    design = torch.stack([torch.ones_like(log_x), -log_x], dim=1)  # log L = c - exponent log x
    c, exponent = torch.linalg.lstsq(design, log_l[:, None]).solution[:, 0].tolist()
    return PowerLaw(exponent, math.exp(c / exponent) if exponent else math.inf)


@dataclass(frozen=True)
class KaplanFit:
    """L(N, D) = ((N_c / N)^(alpha_N / alpha_D) + D_c / D)^alpha_D, and its mean squared log residual."""
    alpha_n: float
    alpha_d: float
    n_c: float
    d_c: float
    objective: float

    def __call__(self, n: float, d: float) -> float:
        return ((self.n_c / n) ** (self.alpha_n / self.alpha_d) + self.d_c / d) ** self.alpha_d


def fit_kaplan(n: list[float], d: list[float], loss: list[float], start: KaplanFit | None = None,
               max_iter: int = 500) -> KaplanFit:
    """Kaplan et al.'s joint L(N, D) (their equation 1.5) fitted to runs of `n` parameters trained on `d` tokens
    to `loss`: least squares on log L, by L-BFGS from a small grid of exponents with N_c and D_c started where
    each term alone would give the mean loss, or from `start` alone (refitting resamples)."""
    log_n, log_d, log_l = _positive_logs(n, "N"), _positive_logs(d, "D"), _positive_logs(loss, "loss")
    if not len(log_n) == len(log_d) == len(log_l) or len(log_l) < 4:
        raise LmlabError(f"Kaplan's L(N, D) has 4 parameters and needs at least 4 runs, got {len(log_l)}")

    def objective(params: torch.Tensor) -> torch.Tensor:  # (log N_c, log D_c, log alpha_N, log alpha_D) -> ()
        log_nc, log_dc, alpha_n, alpha_d = params[0], params[1], params[2].exp(), params[3].exp()
        predicted = alpha_d * torch.logaddexp(alpha_n / alpha_d * (log_nc - log_n), log_dc - log_d)
        return ((predicted - log_l) ** 2).mean()

    if start:
        starts = [[math.log(start.n_c), math.log(start.d_c), math.log(start.alpha_n), math.log(start.alpha_d)]]
    else:
        starts = [[float(log_n.mean() + log_l.mean() / alpha_n), float(log_d.mean() + log_l.mean() / alpha_d),
                   math.log(alpha_n), math.log(alpha_d)]
                  for alpha_n, alpha_d in itertools.product((0.05, 0.2, 0.8), (0.05, 0.2, 0.8))]
    starts = torch.tensor(starts, dtype=torch.float64)  # (S, 4)
    value, (log_nc, log_dc, log_alpha_n, log_alpha_d) = _best_minimum(objective, starts, max_iter, "Kaplan's fit")
    return KaplanFit(math.exp(log_alpha_n), math.exp(log_alpha_d), math.exp(log_nc), math.exp(log_dc), value)


def fit_chinchilla(n: list[float], d: list[float], loss: list[float], grid: dict | None = None, starts: int = 16,
                   max_iter: int = 200) -> ChinchillaFit:
    """Chinchilla's L(N, D) fitted to runs of `n` parameters trained on `d` tokens to `loss`, as Hoffmann et
    al. fit it: the Huber loss of log-space residuals, minimised by L-BFGS from points of `grid` (default
    theirs, 3,750 points). Every grid point is scored and L-BFGS runs from the `starts` best, each on its own;
    the best result is kept."""
    log_n, log_d, log_l = _positive_logs(n, "N"), _positive_logs(d, "D"), _positive_logs(loss, "loss")
    if not len(log_n) == len(log_d) == len(log_l) or len(log_l) < 5:
        raise LmlabError(f"Chinchilla's law has 5 parameters and needs at least 5 runs, got {len(log_l)}")
    grid = grid or _GRID
    points = torch.tensor(list(itertools.product(*(grid[k] for k in ("a", "b", "e", "alpha", "beta")))),
                          dtype=torch.float64)  # (S, 5): a, b, e, alpha, beta

    def objective(params: torch.Tensor) -> torch.Tensor:  # params (..., 5) -> (...)
        a, b, e, alpha, beta = params[..., None, :].unbind(dim=-1)  # each (..., 1)
        predicted = torch.logsumexp(torch.stack([a - alpha * log_n, b - beta * log_d, e.expand(*e.shape[:-1],
                                                                                                  len(log_n))]), dim=0)
        return torch.nn.functional.huber_loss(predicted, log_l.expand_as(predicted), delta=HUBER_DELTA,
                                              reduction="none").sum(dim=-1)

    value, (a, b, e, alpha, beta) = _best_minimum(objective, points[objective(points).argsort()[:starts]], max_iter,
                                                  "the Chinchilla fit")
    return ChinchillaFit(math.exp(e), math.exp(a), math.exp(b), alpha, beta, value)


def compute_optimal(fit: ChinchillaFit, flops: float) -> tuple[float, float]:
    """(N_opt, D_opt): the model size and tokens that minimise `fit`'s loss for a compute of `flops` = 6 N D."""
    if not fit.alpha > 0 < fit.beta:
        raise LmlabError(f"the fit's exponents (alpha {fit.alpha:.3g}, beta {fit.beta:.3g}) are not both positive: "
                         "its loss has no compute-optimal size; fit on runs that span more sizes and tokens")
    g = (fit.alpha * fit.A / (fit.beta * fit.B)) ** (1 / (fit.alpha + fit.beta))
    n_opt = g * (flops / 6) ** (fit.beta / (fit.alpha + fit.beta))
    return n_opt, flops / (6 * n_opt)


def isoflop_optimum(n: list[float], loss: list[float]) -> float:
    """The model size with the lowest loss along one isoFLOP profile (runs of the same compute, Hoffmann et
    al.'s approach 2): a parabola fitted to the loss against log N, its vertex. The runs must bracket it."""
    log_n, values = _positive_logs(n, "N"), torch.tensor(loss, dtype=torch.float64)
    if len(log_n) != len(values) or len(log_n) < 3 or len(set(log_n.tolist())) < 3:
        raise LmlabError("an isoFLOP profile needs at least three runs of different sizes")
    design = torch.stack([log_n**2, log_n, torch.ones_like(log_n)], dim=1)
    curve, slope, _ = torch.linalg.lstsq(design, values[:, None]).solution[:, 0].tolist()
    vertex = -slope / (2 * curve) if curve > 0 else math.nan
    if not float(log_n.min()) <= vertex <= float(log_n.max()):
        raise LmlabError("the isoFLOP profile's lowest loss lies outside its runs' sizes (or it curves the wrong "
                         "way); add runs on the side where the loss still falls")
    return math.exp(vertex)


def bootstrap(fit: Callable[[list[int]], dict[str, float]], points: int, samples: int = 200, seed: int = 0,
              level: float = 0.9) -> dict[str, tuple[float, float]]:
    """Percentile intervals (`level`, two-sided) of the numbers `fit(indices)` returns, over `samples` resamples
    with replacement of the `points` data points (`fit` refits on the points at those indices)."""
    generator = torch.Generator().manual_seed(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(samples):
        for name, value in fit(torch.randint(points, (points,), generator=generator).tolist()).items():
            draws.setdefault(name, []).append(value)
    low, high = (1 - level) / 2, (1 + level) / 2
    return {name: tuple(torch.tensor(values, dtype=torch.float64).quantile(torch.tensor([low, high],
                                                                          dtype=torch.float64)).tolist())
            for name, values in draws.items()}


def _lbfgs(objective: Callable[[torch.Tensor], torch.Tensor], start: torch.Tensor, max_iter: int) -> torch.Tensor:
    """The parameters (P,) L-BFGS with a strong-Wolfe line search reaches from `start`."""
    params = start.clone().requires_grad_(True)
    optimizer = torch.optim.LBFGS([params], max_iter=max_iter, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-12, tolerance_change=1e-15)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        value = objective(params)
        value.backward()
        return value

    optimizer.step(closure)
    return params


def _best_minimum(objective: Callable[[torch.Tensor], torch.Tensor], starts: torch.Tensor, max_iter: int,
                  name: str) -> tuple[float, list[float]]:
    """(objective, parameters) of the lowest minimum L-BFGS reaches from each row of `starts` (S, P)."""
    best = None
    for start in starts:
        params = _lbfgs(objective, start, max_iter)
        value = float(objective(params.detach()))
        if math.isfinite(value) and (best is None or value < best[0]):
            best = (value, params.detach().tolist())
    if best is None:
        raise LmlabError(f"no start of {name} reached a finite loss; check the runs' N, D and loss")
    return best


def _positive_logs(values: list[float], name: str) -> torch.Tensor:
    tensor = torch.tensor(values, dtype=torch.float64)
    if tensor.dim() != 1 or not bool((tensor > 0).all() and tensor.isfinite().all()):
        raise LmlabError(f"every {name} of a scaling-law fit must be a positive finite number")
    return tensor.log()
