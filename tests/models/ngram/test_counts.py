"""N-gram counting: the sort-based counts equal a plain Counter, and continuation counts follow their definition."""

from collections import Counter

import numpy as np
import pytest

from lmlab.errors import LmlabError
from lmlab.models.ngram import count_ngrams, counts_of_counts, sentence_runs, stream_runs
from lmlab.models.ngram.tables import BackoffTables


def _runs_as_lists(runs):
    breaks = np.flatnonzero(runs.starts)
    return [list(part) for part in np.split(runs.tokens, breaks[1:])]


def _by_tuple(counts, values):
    """{k-gram tuple: value} for every order, decoding the keys through the trie."""
    tables = BackoffTables(counts.order, counts.vocab_size, counts.keys, (), ())
    result = {}
    for k in range(1, counts.order + 1):
        for gram, value in zip(map(tuple, tables.token_ids(k).tolist()), values[k - 1].tolist()):
            if value:
                result[gram] = value
    return result


def _brute_force(runs, order, bos_id=None):
    raw, left = Counter(), {}
    for run in _runs_as_lists(runs):
        for k in range(1, order + 1):
            for i in range(len(run) - k + 1):
                gram = tuple(run[i:i + k])
                if gram == (bos_id,):
                    continue
                raw[gram] += 1
                left.setdefault(gram, Counter())[run[i - 1] if i > 0 else None] += 1
    # adjusted: distinct left neighbours, each run-initial occurrence counting on its own (highest order: raw)
    adjusted = {g: (raw[g] if len(g) == order else len(set(left[g]) - {None}) + left[g][None]) for g in raw}
    return dict(raw), adjusted


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_stream_counts_equal_a_counter_and_continuations_follow_their_definition(order):
    rng = np.random.default_rng(order)
    runs = stream_runs(rng.integers(0, 6, 300), run_starts=[0, 17, 100, 101, 250])
    counts = count_ngrams(runs, order, vocab_size=7)
    raw, adjusted = _brute_force(runs, order)
    assert _by_tuple(counts, counts.counts) == raw
    assert _by_tuple(counts, counts.adjusted) == adjusted


def test_sentence_counts_never_predict_bos_and_give_bos_ngrams_their_raw_counts():
    sentences = [[3, 4, 3], [4], [3, 3, 5, 4], [4]]
    runs = sentence_runs(sentences, bos_id=1, eos_id=2)
    counts = count_ngrams(runs, 3, vocab_size=6)
    raw, adjusted = _brute_force(runs, 3, bos_id=1)
    assert _by_tuple(counts, counts.counts) == raw
    assert _by_tuple(counts, counts.adjusted) == adjusted
    assert counts.counts[0][1] == 0 and counts.adjusted[0][1] == 0
    assert adjusted[(1, 4)] == raw[(1, 4)] == 2  # "<s> 4" starts two sentences: raw count, nothing precedes <s>


def test_ngrams_do_not_cross_runs():
    counts = count_ngrams(stream_runs(np.array([0, 1, 0, 1]), run_starts=[2]), 2, vocab_size=2)
    assert counts.counts[1].tolist() == [2]  # only "0 1", twice; "1 0" spans the break


def test_counts_of_counts_histogram():
    assert counts_of_counts(np.array([0, 1, 1, 2, 4, 4, 4, 9])).tolist() == [0, 2, 1, 0, 3]


@pytest.mark.parametrize("order, vocab, data, message", [
    (0, 5, [1, 2], "order 0 must be at least 1"),
    (2, 0, [1, 2], "vocabulary size 0"),
    (2, 3, [1, 7], r"token ids must lie in \[0, 3\)"),
])
def test_bad_counting_input_is_one_clear_error(order, vocab, data, message):
    with pytest.raises(LmlabError, match=message):
        count_ngrams(stream_runs(np.array(data)), order, vocab)


def test_empty_data_is_refused():
    with pytest.raises(LmlabError, match="non-empty"):
        stream_runs(np.array([], dtype=np.int64))
    with pytest.raises(LmlabError, match="no sentences"):
        sentence_runs([], 1, 2)
