"""Stupid backoff (Brants et al., 2007): a fast score, NOT a probability distribution.

    S(w | h) = c(h w) / c(h .)        if h w was seen
             = alpha S(w | h[1:])     otherwise, alpha = 0.4
    S(w)     = (c(w) + 1) / (N + V)   (add-one, so that an unseen token still scores above zero)

Scores after one context do not sum to 1, so lmlab refuses to report a perplexity for it. As in
an ARPA file, alpha is paid when backing off from a context that is in the tables; Brants et al.
also pay it when the context itself was never seen.
"""

import math

import numpy as np

from lmlab.models.ngram.counts import NGramCounts
from lmlab.models.ngram.tables import BackoffTables, make_tables

ALPHA = 0.4


def stupid_backoff(counts: NGramCounts, alpha: float = ALPHA) -> BackoffTables:
    """Relative frequencies at every order and a constant backoff factor `alpha`."""
    c = counts.counts[0].astype(np.float64)  # (V,)
    probs = [(c + 1) / (c.sum() + counts.vocab_size)]
    for k in range(2, counts.order + 1):
        c = counts.counts[k - 1].astype(np.float64)  # (n_k,)
        probs.append(c / counts.per_context(k, c)[counts.contexts(k)])
    log_backoffs = [np.full(len(keys), math.log(alpha)) for keys in counts.keys[:-1]]
    return make_tables(counts.order, counts.vocab_size, counts.keys, probs, log_backoffs)
