"""Task metrics for classification and regression: accuracy, F1, Matthews correlation, Pearson, Spearman.

Plain functions over lists (or arrays) of predictions and gold values, so a recipe, a test or a
notebook can call them on anything. Labels may be any hashable values (ids or names).
"""

from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np

from lmlab.errors import LmlabError


def _check_lengths(predictions: Sequence, gold: Sequence) -> None:
    if len(predictions) != len(gold):
        raise LmlabError(f"{len(predictions)} predictions for {len(gold)} gold values; pass one per example")
    if len(gold) == 0:
        raise LmlabError("no examples to score; pass at least one prediction")


def accuracy(predictions: Sequence[Hashable], gold: Sequence[Hashable]) -> float:
    """The share of predictions equal to the gold label."""
    _check_lengths(predictions, gold)
    return sum(p == g for p, g in zip(predictions, gold)) / len(gold)


def f1_scores(predictions: Sequence[Hashable], gold: Sequence[Hashable]) -> dict[str, float]:
    """Macro F1 (the mean of each class's F1, over the classes seen in gold or predictions: rare
    classes count as much as common ones) and micro F1 (F1 of the pooled true/false positives and
    false negatives; for one label per example it equals the accuracy)."""
    _check_lengths(predictions, gold)
    true_pos = Counter(g for p, g in zip(predictions, gold) if p == g)
    predicted, actual = Counter(predictions), Counter(gold)
    per_class = [_f1(true_pos[c], predicted[c], actual[c]) for c in predicted.keys() | actual.keys()]
    return {"macro_f1": sum(per_class) / len(per_class),
            "micro_f1": _f1(sum(true_pos.values()), len(predictions), len(gold))}


def _f1(true_pos: int, n_predicted: int, n_gold: int) -> float:
    """2 TP / (2 TP + FP + FN), 0 when there is nothing predicted nor gold."""
    return 2 * true_pos / (n_predicted + n_gold) if n_predicted + n_gold else 0.0


def matthews_correlation(predictions: Sequence[Hashable], gold: Sequence[Hashable]) -> float:
    """Matthews correlation (CoLA's metric), for two classes or more (Gorodkin's R_K):

        (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2))

    with s examples, c correct, p_k predicted and t_k true counts of class k; 0 when a side is constant.
    """
    _check_lengths(predictions, gold)
    s, c = len(gold), sum(p == g for p, g in zip(predictions, gold))
    predicted, actual = Counter(predictions), Counter(gold)
    classes = predicted.keys() | actual.keys()
    numerator = c * s - sum(predicted[k] * actual[k] for k in classes)
    denominator = ((s * s - sum(v * v for v in predicted.values())) * (s * s - sum(v * v for v in actual.values())))
    return numerator / denominator ** 0.5 if denominator else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r: the covariance of x and y over the product of their standard deviations (0 if one is constant)."""
    _check_lengths(x, y)
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt((dx * dx).sum() * (dy * dy).sum())
    return float((dx * dy).sum() / denominator) if denominator else 0.0


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the ranks; tied values share the mean of their ranks."""
    return pearson(ranks(x), ranks(y))


def ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks of `values`, ties given the average rank of their group: [10, 20, 20, 5] -> [2, 3.5, 3.5, 1]."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    result = np.empty(len(values))
    start = 0
    while start < len(values):
        stop = start
        while stop + 1 < len(values) and sorted_values[stop + 1] == sorted_values[start]:
            stop += 1
        result[order[start:stop + 1]] = (start + stop) / 2 + 1
        start = stop + 1
    return result
