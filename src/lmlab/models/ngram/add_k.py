"""Add-k smoothing (Laplace when k = 1): P(w | h) = (c(h w) + k) / (c(h .) + k V).

Only the highest order n is smoothed: every context h, seen or not, gets this distribution (an
unseen one gets the uniform 1/V). In backoff form that is P*(h w) = (c(h w) + k) / (c(h .) + k V)
for seen n-grams and bo(h) = k V / (c(h .) + k V) times a uniform lower order, so the model
exports to ARPA exactly. A history shorter than n-1 tokens (the very start of a text) is treated
as an unseen context: uniform.
"""

import numpy as np

from lmlab.errors import LmlabError
from lmlab.models.ngram.counts import NGramCounts
from lmlab.models.ngram.tables import BackoffTables, make_tables


def add_k(counts: NGramCounts, k: float = 1.0) -> BackoffTables:
    """Add-k tables: k pseudo-counts for every word after every context of the highest order."""
    if not k > 0:
        raise LmlabError(f"add-k needs k > 0, got {k}; use 1 for Laplace smoothing")
    n, vocab = counts.order, counts.vocab_size
    c = counts.counts[n - 1].astype(np.float64)  # (n_n,)
    if n == 1:
        return make_tables(1, vocab, counts.keys, [(c + k) / (c.sum() + k * vocab)], [])
    total = counts.per_context(n, c)  # (n_{n-1},) c(h .)
    probs = [np.full(len(keys), 1.0 / vocab) for keys in counts.keys[:-1]]  # lower orders: uniform
    probs.append((c + k) / (total[counts.contexts(n)] + k * vocab))
    log_backoffs = [np.zeros(len(keys)) for keys in counts.keys[:-2]]
    log_backoffs.append(np.log(k * vocab / (total + k * vocab)))
    return make_tables(n, vocab, counts.keys, probs, log_backoffs)
