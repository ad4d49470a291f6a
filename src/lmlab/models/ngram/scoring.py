"""Scoring with backoff tables, vectorized over whole batches of token ids.

`token_log_probs` gives ln P(token | up to n-1 tokens before it in its row) for every token: the fast
path for validation and benchmarks. It runs in C++ (`scoring.cpp`: one hash probe per order and
position, as kenlm's probing model) where lmlab's compiled libraries build, else in numpy with a
handful of binary searches per order; both give the same bits.
`next_log_probs` gives the whole distribution over the vocabulary after a position: what a
language model's logits are, for perplexity windows and generation.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from lmlab.errors import LmlabError
from lmlab.models.ngram.tables import BackoffTables
from lmlab.modules.kernels.build import Library, compiled

SCORER = Library("lmlab_ngram", (Path(__file__).with_name("scoring.cpp"),), "the n-gram scorer",
                 "n-gram scoring runs in numpy (binary searches: slower, same numbers)")


def ngram_indices(tables: BackoffTables, ids: np.ndarray) -> list[np.ndarray]:
    """For k = 1..n, (B, T) the level-k index of the k-gram ending at each position (-1: not in the
    tables, or fewer than k tokens so far in the row)."""
    ids = np.asarray(ids, dtype=np.int64)  # (B, T)
    indices = [ids]
    for k in range(2, tables.order + 1):
        prefix = np.full_like(ids, -1)  # (B, T) the (k-1)-gram ending one position earlier
        prefix[:, 1:] = indices[-1][:, :-1]
        indices.append(tables.lookup(k, prefix, ids))
    return indices


def token_log_probs(tables: BackoffTables, ids: np.ndarray) -> np.ndarray:
    """(B, T) float64 ln P(ids[b, t] | ids[b, t-n+1 : t]); a row's first token is scored by the unigrams."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)  # (B, T)
    if ids.size and not (0 <= ids.min() and ids.max() < tables.vocab_size):
        raise LmlabError(f"token ids must lie in [0, {tables.vocab_size}), the model's vocabulary; got "
                         f"{ids.min()}..{ids.max()}: were they made with another tokenizer?")
    ops = compiled(SCORER)
    if ops is None:
        return _token_log_probs_numpy(tables, ids)
    unigram_backoffs = tables.log_backoffs[0] if tables.order > 1 else np.zeros(0, dtype=np.float32)
    return ops.token_log_probs(torch.from_numpy(ids), tables.hashes(ops.hash_index),
                               torch.from_numpy(tables.log_probs[0]), torch.from_numpy(unigram_backoffs),
                               tables.vocab_size).numpy()


def _token_log_probs_numpy(tables: BackoffTables, ids: np.ndarray) -> np.ndarray:
    """`token_log_probs` without the C++ scorer: each order's indices by binary search, then whole-array selects."""
    indices = ngram_indices(tables, ids)
    log_prob = np.zeros(indices[0].shape)  # (B, T)
    matched = np.zeros(indices[0].shape, dtype=np.int64)  # (B, T) the order of the longest n-gram found
    for k, index in enumerate(indices, 1):  # whole-array selects: faster than masked assignment
        found = index >= 0
        log_prob = np.where(found, tables.log_probs[k - 1][np.maximum(index, 0)], log_prob)
        matched = np.where(found, k, matched)
    for j in range(1, tables.order):  # back off from every context longer than the match: bo(h) for |h| >= m
        context = np.full_like(indices[j - 1], -1)  # (B, T) the j-gram ending just before each position
        context[:, 1:] = indices[j - 1][:, :-1]
        use = (context >= 0) & (matched <= j)
        log_prob += np.where(use, tables.log_backoffs[j - 1][np.maximum(context, 0)], 0.0)  # + 0.0 changes nothing
    return log_prob


def next_log_probs(tables: BackoffTables, ids: np.ndarray, last_only: bool = False) -> np.ndarray:
    """(B, T, V) float32 ln P(. | ids[b, :t+1]) after every position; (B, V) after the last one with `last_only`."""
    indices = ngram_indices(tables, ids)[: tables.order - 1]  # contexts of length 1..n-1 ending at each position
    if last_only:
        indices = [index[:, -1:] for index in indices]
    batch, steps = np.shape(ids)[0], (1 if last_only else np.shape(ids)[1])
    rows = batch * steps
    out = np.tile(tables.log_probs[0], (rows, 1))  # (P, V) the unigram distribution
    for j, index in enumerate(indices, 1):
        context = index.reshape(rows)  # (P,)
        active = np.flatnonzero(context >= 0)  # (A,) rows whose last j tokens are a known context
        if len(active) == 0:
            break
        out[active] += tables.log_backoffs[j - 1][context[active], None]
        begin, end = tables.children(j + 1, context[active])  # (A,), (A,)
        lengths = end - begin
        row = np.repeat(active, lengths)  # (C,) one entry per seen continuation
        entry = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths) + np.repeat(begin, lengths)
        out[row, tables.keys[j][entry] % tables.vocab_size] = tables.log_probs[j][entry]
    return out.reshape(batch, tables.vocab_size) if last_only else out.reshape(batch, steps, tables.vocab_size)


def sentence_log_prob(tables: BackoffTables, ids: Sequence[int], bos_id: int, eos_id: int) -> float:
    """ln P(ids and then eos | bos): a sentence scored as ARPA tools do (kenlm's `score(s, bos=True,
    eos=True)`, which is in log10)."""
    row = np.array([[bos_id, *ids, eos_id]], dtype=np.int64)  # (1, T)
    return float(token_log_probs(tables, row)[0, 1:].sum())
