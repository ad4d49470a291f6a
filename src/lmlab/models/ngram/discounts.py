"""Kneser-Ney discounts from counts-of-counts n_r (how many n-grams of one order were seen r times).

Interpolated KN subtracts one D per order, D = n1 / (n1 + 2 n2). Modified KN (Chen & Goodman)
subtracts D1, D2 or D3+ by whether an n-gram was seen once, twice or more:
    Y = n1 / (n1 + 2 n2),  D1 = 1 - 2Y n2/n1,  D2 = 2 - 3Y n3/n2,  D3+ = 3 - 4Y n4/n3.
Tiny corpora may lack some n_r; then the estimate is replaced by a safe value, as documented below.
"""

import numpy as np

FALLBACK_DISCOUNT = 0.5  # when an order has no singletons to estimate D from


def kn_discount(n: np.ndarray) -> float:
    """D = n1 / (n1 + 2 n2) from counts-of-counts `n` (n[r] = n_r); 0.5 when n1 = 0 (a zero D would give
    unseen words no probability at all)."""
    n1, n2 = float(n[1]), float(n[2])
    return n1 / (n1 + 2 * n2) if n1 > 0 else FALLBACK_DISCOUNT


def modified_kn_discounts(n: np.ndarray) -> tuple[float, float, float]:
    """(D1, D2, D3+) from counts-of-counts `n` (n[r] = n_r, r <= 4). When some n_r is zero, or a
    discount falls outside (0, r], the single KN discount is used for all three."""
    n1, n2, n3, n4 = (float(n[r]) for r in (1, 2, 3, 4))
    if min(n1, n2, n3, n4) > 0:
        y = n1 / (n1 + 2 * n2)
        d = (1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3)
        if all(0 < value <= r for value, r in zip(d, (1, 2, 3))):
            return d
    single = kn_discount(n)
    return single, single, single
