"""Win rates from a judge's verdicts: the rate itself, a bootstrap interval, and a length-controlled rate.

A verdict is the judge's preference for model A's reply over model B's on one prompt: 1 (A wins), 0.5 (a
tie) or 0 (B wins). The win rate is their mean, so a tie counts half. Its interval is the percentile
bootstrap of `eval.intervals`: resample the prompts with replacement, recompute the rate, read the
(1 - confidence) / 2 and (1 + confidence) / 2 quantiles of the resampled rates (scipy.stats.bootstrap's
"percentile" method on the same draws).

Judges like long replies, so a model can win by saying more. The length-controlled win rate (in the
spirit of AlpacaEval 2, Dubois et al. 2024) fits a logistic regression of the verdict on the length
difference,

    P(A preferred | d) = sigmoid(w0 + w1 * d),     d = (len_A - len_B) / sd(len_A - len_B)   (tokens)

and reports sigmoid(w0): the win rate the fit predicts when both replies are equally long. Ties are soft
targets of 0.5; the slope has an L2 penalty (w1^2 / 2, scikit-learn's default C = 1) so a length that
separates the verdicts perfectly still gives a finite fit. What it is not: AlpacaEval's GLM is fitted
over many models at once, with a term per model, a tanh of the length difference and a term per
instruction's difficulty, against one fixed baseline; this fit sees one pair of models on one prompt
set, so its number corrects this comparison for length and is not on AlpacaEval's leaderboard scale. When
one model's replies are all longer than the other's, zero difference lies outside the data and the rate is
an extrapolation of the fit (`length_extrapolated`), not a measurement.
"""

from dataclasses import dataclass

import numpy as np
import torch

from lmlab.eval.intervals import bootstrap_interval

A_WINS, TIE, B_WINS = 1.0, 0.5, 0.0


@dataclass(frozen=True)
class WinRate:
    """Model A against model B over n prompts (rates in [0, 1])."""

    n: int
    wins: int  # prompts where A's reply was preferred
    ties: int
    losses: int  # prompts where B's reply was preferred
    win_rate: float  # (wins + ties / 2) / n
    interval: tuple[float, float]  # percentile bootstrap interval of win_rate
    confidence: float  # of the interval, e.g. 0.95
    length_controlled: float  # sigmoid(w0) of the length regression: the win rate at equal lengths
    length_slope: float  # w1: how much a standard deviation of extra length moves the log-odds
    length_extrapolated: bool  # every reply of A is longer (or every one shorter) than B's: equal lengths were never seen


def length_regression(verdicts: np.ndarray, length_a: np.ndarray, length_b: np.ndarray) -> tuple[float, float]:
    """(w0, w1) of the logistic regression of `verdicts` (n,) on the standardised length difference:
    minimises sum_i BCE(sigmoid(w0 + w1 d_i), v_i) + w1^2 / 2 with L-BFGS (see the module docstring)."""
    diff = torch.tensor(length_a - length_b, dtype=torch.float64)  # (n,)
    scale = diff.std(correction=0)
    d = diff / scale if scale > 0 else torch.zeros_like(diff)  # (n,) equal lengths everywhere: no slope to fit
    target = torch.tensor(verdicts, dtype=torch.float64)  # (n,)
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)  # (w0, w1)
    optimizer = torch.optim.LBFGS([w], lr=1.0, max_iter=200, tolerance_grad=1e-10, tolerance_change=1e-12,
                                  line_search_fn="strong_wolfe")

    def objective() -> torch.Tensor:
        optimizer.zero_grad()
        logits = w[0] + w[1] * d  # (n,)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="sum")
        loss = loss + w[1] ** 2 / 2
        loss.backward()
        return loss

    optimizer.step(objective)
    w0, w1 = w.detach().tolist()
    return w0, w1


def win_rate(verdicts, length_a, length_b, n_resamples: int = 1000, seed: int = 0,
             confidence: float = 0.95) -> WinRate:
    """Model A's win rate over B from per-prompt `verdicts` (1, 0.5 or 0) and reply lengths in tokens
    (each (n,)): counts, the rate, its bootstrap interval and the length-controlled rate."""
    verdicts = np.asarray(verdicts, dtype=np.float64)
    length_a, length_b = np.asarray(length_a, dtype=np.float64), np.asarray(length_b, dtype=np.float64)
    w0, w1 = length_regression(verdicts, length_a, length_b)
    return WinRate(n=len(verdicts), wins=int((verdicts == A_WINS).sum()), ties=int((verdicts == TIE).sum()),
                   losses=int((verdicts == B_WINS).sum()), win_rate=float(verdicts.mean()),
                   interval=bootstrap_interval(verdicts, confidence, n_resamples, seed), confidence=confidence,
                   length_controlled=float(torch.sigmoid(torch.tensor(w0))), length_slope=w1,
                   length_extrapolated=bool((length_a > length_b).all() or (length_a < length_b).all()))
