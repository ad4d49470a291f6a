"""Counting n-grams of every order 1..n with numpy sorts, fast enough for 10M tokens in seconds.

Each k-gram (k >= 2) is one int64 key, `prefix * V + last`: the index of its first k-1 tokens among
the (k-1)-grams, times the vocabulary size, plus its last token. Keys are sorted, so the k-grams
that share a context sit side by side (a trie, level by level), and a lookup is a binary search.
Unigrams are dense: the 1-gram index of a token is its id.

Besides raw counts c(g), Kneser-Ney needs continuation counts: how many distinct words precede g,
N1+(. g). A word at the start of a run has no left neighbour, so each such occurrence counts as
its own continuation (for `<s> ..` n-grams this makes the adjusted count the raw count, as kenlm
does). The adjusted count of a k-gram is its continuation count for k < n and its raw count at n.
"""

from dataclasses import dataclass

import numpy as np

from lmlab.errors import LmlabError
from lmlab.models.ngram.runs import TokenRuns


@dataclass(frozen=True, eq=False)
class NGramCounts:
    order: int
    vocab_size: int
    keys: tuple[np.ndarray, ...]  # keys[k-1]: (n_k,) sorted int64 keys of the k-grams; level 1: arange(V)
    counts: tuple[np.ndarray, ...]  # counts[k-1]: (n_k,) int64 raw counts c(g)
    adjusted: tuple[np.ndarray, ...]  # adjusted[k-1]: (n_k,) int64 continuation counts (k < n), raw at k = n
    suffixes: tuple[np.ndarray, ...]  # suffixes[k-1]: (n_k,) index of g's last k-1 tokens in level k-1; level 1: empty

    def contexts(self, k: int) -> np.ndarray:
        """(n_k,) the index of each k-gram's first k-1 tokens in level k-1 (k >= 2)."""
        return self.keys[k - 1] // self.vocab_size

    def words(self, k: int) -> np.ndarray:
        """(n_k,) the last token of each k-gram."""
        return self.keys[k - 1] % self.vocab_size

    def per_context(self, k: int, values: np.ndarray) -> np.ndarray:
        """(n_{k-1},) the sum of `values` (n_k,) over the k-grams of each context, e.g. c(h .) from c(h w)."""
        return np.bincount(self.contexts(k), weights=values, minlength=len(self.keys[k - 2]))


def count_ngrams(runs: TokenRuns, order: int, vocab_size: int) -> NGramCounts:
    """Raw and adjusted counts of every k-gram (k = 1..order) inside the runs of `runs`."""
    if order < 1:
        raise LmlabError(f"n-gram order {order} must be at least 1")
    tokens, starts = runs.tokens, runs.starts  # (N,), (N,)
    if vocab_size < 1:
        raise LmlabError(f"vocabulary size {vocab_size} must be at least 1")
    if len(tokens) == 0:
        raise LmlabError("there are no tokens to count; pass some data")
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise LmlabError(f"token ids must lie in [0, {vocab_size}); got {tokens.min()}..{tokens.max()}")
    run_ids = runs.run_ids  # (N,)
    n_tokens = len(tokens)

    counts = np.bincount(tokens, minlength=vocab_size)  # (V,)
    at_start = np.bincount(tokens[starts], minlength=vocab_size)  # (V,)
    if runs.bos_id is not None:  # <s> is only a context
        counts[runs.bos_id] = at_start[runs.bos_id] = 0
    keys, raw, start_counts = [np.arange(vocab_size, dtype=np.int64)], [counts], [at_start]
    suffixes = [np.zeros(0, np.int64)]
    index = tokens  # (N - k + 2,) at level k - 1: the index of the (k-1)-gram starting at each position
    for k in range(2, order + 1):
        m = n_tokens - k + 1  # positions where a k-gram can start
        if m <= 0:
            keys.append(np.zeros(0, np.int64)), raw.append(np.zeros(0, np.int64))
            start_counts.append(np.zeros(0, np.int64)), suffixes.append(np.zeros(0, np.int64))
            index = np.zeros(0, np.int64)
            continue
        inside = (run_ids[k - 1:] == run_ids[:m]) & (index[:m] >= 0)  # (m,) the k-gram lies in one run
        key = index[:m][inside] * vocab_size + tokens[k - 1:][inside]  # (n_inside,)
        level_keys, first, inverse, level_counts = _unique(key)
        suffix = index[1:m + 1][inside][first]  # (n_k,) level k-1 index of tokens 2..k
        next_index = np.full(m, -1, dtype=np.int64)
        next_index[inside] = inverse
        starting = next_index[starts[:m] & inside]
        keys.append(level_keys), raw.append(level_counts.astype(np.int64)), suffixes.append(suffix)
        start_counts.append(np.bincount(starting, minlength=len(level_keys)))
        index = next_index

    adjusted = []
    for k in range(1, order + 1):
        if k == order:
            adjusted.append(raw[k - 1])
            continue
        left = np.bincount(suffixes[k], minlength=len(keys[k - 1]))  # N1+(. g): distinct (k+1)-grams ending in g
        adjusted.append(left + start_counts[k - 1])
    if raw[0].sum() == 0:
        raise LmlabError("the data has no token to predict (only sentence starts); pass some data")
    return NGramCounts(order, vocab_size, tuple(keys), tuple(raw), tuple(adjusted), tuple(suffixes))


def _unique(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """np.unique(key, return_index, return_inverse, return_counts) for non-negative keys, about twice as
    fast: `first` is some occurrence of each key, not necessarily the first (enough here)."""
    ordered, order = _sort_with_positions(key)  # (m,), (m,)
    new = np.empty(len(key), dtype=bool)  # (m,) where a new key begins in sorted order
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    inverse = np.empty(len(key), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    begins = np.flatnonzero(new)  # (n_unique,)
    return ordered[begins], order[begins], inverse, np.diff(np.append(begins, len(key)))


def _sort_with_positions(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(np.sort(key), an argsort of key). When key and position fit in 63 bits together, one sort of
    `key << bits | position` does both (a plain sort is about twice as fast as an argsort)."""
    position_bits = max(1, int(len(key) - 1).bit_length())
    if int(key.max()).bit_length() + position_bits > 63:
        order = np.argsort(key)
        return key[order], order
    packed = np.sort((key << position_bits) | np.arange(len(key), dtype=np.int64))
    return packed >> position_bits, packed & ((1 << position_bits) - 1)


def counts_of_counts(counts: np.ndarray, up_to: int = 4) -> np.ndarray:
    """(up_to + 1,) how many n-grams were seen exactly r times, r = 0..up_to (r = 0 is unused: 0)."""
    histogram = np.bincount(counts[(counts > 0) & (counts <= up_to)], minlength=up_to + 1)
    histogram[0] = 0
    return histogram
