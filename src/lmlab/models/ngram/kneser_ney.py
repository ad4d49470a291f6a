"""Interpolated Kneser-Ney, with one discount per order (KN) or three (modified KN, Chen & Goodman).

At every order k the (adjusted) counts a of the k-grams are discounted, and the mass taken away is
given to the order below, with the same context shortened by one word:
    P_k(w | h) = max(a(h w) - D(a), 0) / a(h .) + gamma(h) P_{k-1}(w | h[1:])
    gamma(h)   = sum_w D(a(h w)) / a(h .)
The highest order uses raw counts, the lower ones continuation counts (see `counts`): a word that
follows many different words is a likely continuation, whatever its raw frequency. The lowest order
interpolates with the uniform distribution over the vocabulary, so every token, even one never
seen, gets a probability above zero.
"""

import numpy as np

from lmlab.errors import LmlabError
from lmlab.models.ngram.counts import NGramCounts, counts_of_counts
from lmlab.models.ngram.discounts import kn_discount, modified_kn_discounts
from lmlab.models.ngram.tables import BackoffTables, make_tables


def kn_discounts(counts: NGramCounts) -> tuple[tuple[float], ...]:
    """One discount per order, D = n1 / (n1 + 2 n2) from that order's adjusted counts."""
    return tuple((kn_discount(counts_of_counts(a)),) for a in counts.adjusted)


def modified_kn_discounts_per_order(counts: NGramCounts) -> tuple[tuple[float, float, float], ...]:
    """(D1, D2, D3+) per order, from that order's adjusted counts."""
    return tuple(modified_kn_discounts(counts_of_counts(a)) for a in counts.adjusted)


def kneser_ney(counts: NGramCounts, discounts: tuple[tuple[float, ...], ...]) -> BackoffTables:
    """Interpolated Kneser-Ney tables. `discounts[k-1]` holds order k's discounts for counts 1, 2, ..
    (the last one for all higher counts): one value is KN, three are modified KN."""
    if len(discounts) != counts.order:
        raise LmlabError(f"need discounts for {counts.order} orders, got {len(discounts)}")
    for order, ds in enumerate(discounts, 1):
        if not all(0 < d <= r for r, d in enumerate(ds, 1)):
            raise LmlabError(f"order-{order} discounts {ds} must each lie in (0, r] for count r; "
                             "pass discounts between 0 and 1")
    a = counts.adjusted[0].astype(np.float64)  # (V,)
    d = _discount(a, discounts[0])
    total = a.sum()
    probs = [(a - d) / total + d.sum() / total / counts.vocab_size]  # (V,), interpolated with uniform
    log_backoffs = []
    for k in range(2, counts.order + 1):
        a = counts.adjusted[k - 1].astype(np.float64)  # (n_k,)
        d = _discount(a, discounts[k - 1])
        context = counts.contexts(k)  # (n_k,)
        total = counts.per_context(k, a)  # (n_{k-1},) a(h .)
        gamma = np.divide(counts.per_context(k, d), total, out=np.zeros_like(total), where=total > 0)
        probs.append((a - d) / total[context] + gamma[context] * probs[-1][counts.suffixes[k - 1]])
        with np.errstate(divide="ignore"):
            log_backoffs.append(np.where(total > 0, np.log(gamma), 0.0))  # an unused context backs off for free
    return make_tables(counts.order, counts.vocab_size, counts.keys, probs, log_backoffs)


def _discount(adjusted: np.ndarray, discounts: tuple[float, ...]) -> np.ndarray:
    """The discount of each n-gram by its count: discounts[min(count, len) - 1], 0 for unseen ones."""
    table = np.asarray(discounts, dtype=np.float64)
    pick = np.clip(adjusted, 1, len(table)).astype(np.int64) - 1
    return np.where(adjusted > 0, table[pick], 0.0)
