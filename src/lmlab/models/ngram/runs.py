"""What an n-gram model is counted from: token ids cut into runs that no n-gram crosses.

A plain token stream (a BPE-tokenized corpus) is one run, or a few when only parts of it are
training data. Word-level sentences are one run each, padded as `<s> w1 .. wk </s>` as ARPA files
and kenlm expect: `<s>` is only ever a context, never a predicted word.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lmlab.errors import LmlabError


@dataclass(frozen=True, eq=False)
class TokenRuns:
    tokens: np.ndarray  # (N,) int64 token ids, the runs one after another
    starts: np.ndarray  # (N,) bool, True where a run begins
    bos_id: int | None = None  # the sentence-start id when runs are sentences; it is never predicted

    @property
    def run_ids(self) -> np.ndarray:
        """(N,) int64: which run each token belongs to."""
        return np.cumsum(self.starts) - 1


def stream_runs(ids: np.ndarray, run_starts: Sequence[int] = (0,)) -> TokenRuns:
    """A token stream (N,) as runs beginning at `run_starts` (default: one run, the whole stream)."""
    tokens = np.asarray(ids, dtype=np.int64)
    if tokens.ndim != 1 or len(tokens) == 0:
        raise LmlabError(f"an n-gram model needs a non-empty 1-d array of token ids, got shape {tokens.shape}")
    starts = np.zeros(len(tokens), dtype=bool)
    starts[np.asarray(run_starts, dtype=np.int64)] = True
    starts[0] = True
    return TokenRuns(tokens, starts)


def sentence_runs(sentences: Sequence[Sequence[int]], bos_id: int, eos_id: int) -> TokenRuns:
    """Sentences of token ids as runs `bos w1 .. wk eos`, one per sentence (the ARPA / kenlm convention)."""
    if not sentences:
        raise LmlabError("no sentences to count; pass at least one sentence")
    lengths = np.array([len(s) + 2 for s in sentences], dtype=np.int64)  # (S,)
    tokens = np.concatenate([np.array([bos_id, *s, eos_id], dtype=np.int64) for s in sentences])  # (N,)
    starts = np.zeros(len(tokens), dtype=bool)
    starts[np.concatenate([[0], np.cumsum(lengths)[:-1]])] = True
    return TokenRuns(tokens, starts, bos_id)
