"""Maximum likelihood: P(w | h) = c(h w) / c(h .), the relative frequency, with no smoothing.

An n-gram never seen gets probability 0 (so perplexity on new text is usually infinite: the reason
smoothing exists). For a context never seen at the highest order, the longest seen shorter context
is used instead (ARPA backoff with weight 1), since c(h .) = 0 leaves the ratio undefined.
"""

import numpy as np

from lmlab.models.ngram.counts import NGramCounts
from lmlab.models.ngram.tables import BackoffTables, make_tables


def maximum_likelihood(counts: NGramCounts) -> BackoffTables:
    """Relative-frequency tables: each seen context's distribution is its n-gram counts, normalized."""
    c = counts.counts[0].astype(np.float64)  # (V,)
    probs, log_backoffs = [c / c.sum()], []
    for k in range(2, counts.order + 1):
        c = counts.counts[k - 1].astype(np.float64)  # (n_k,)
        total = counts.per_context(k, c)  # (n_{k-1},) c(h .)
        probs.append(c / total[counts.contexts(k)])
        log_backoffs.append(np.where(total > 0, -np.inf, 0.0))  # seen context: unseen words get 0
    return make_tables(counts.order, counts.vocab_size, counts.keys, probs, log_backoffs)
