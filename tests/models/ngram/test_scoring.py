"""The C++ n-gram scorer (one hash probe per order and position) gives the numpy scorer's bits for every
smoothing and order, and both refuse ids outside the vocabulary in one line."""

import numpy as np
import pytest

from lmlab.errors import LmlabError
from lmlab.models.ngram import fit_ngram, scoring, stream_runs
from lmlab.modules.kernels.build import compiled


@pytest.mark.parametrize("smoothing, order", [("kn", 1), ("kn", 3), ("mkn", 5), ("addk", 2), ("mle", 3),
                                              ("stupid", 4)])
def test_the_compiled_scorer_gives_the_numpy_scorers_bits(smoothing, order):
    assert compiled(scoring.SCORER) is not None, "this test needs a C++ compiler"
    rng = np.random.default_rng(order)
    tokens = np.concatenate([np.tile(rng.integers(0, 60, 40), 50), rng.integers(0, 60, 3000)])  # seen and unseen
    model = fit_ngram(stream_runs(tokens), order, 64, smoothing)
    rows = np.concatenate([tokens[:700].reshape(7, 100), rng.integers(0, 64, (5, 100))])  # ids 60-63 never seen
    fast = scoring.token_log_probs(model.tables, rows)
    assert fast.dtype == np.float64 and fast.shape == rows.shape
    np.testing.assert_array_equal(fast, scoring._token_log_probs_numpy(model.tables, rows))
    np.testing.assert_array_equal(scoring.token_log_probs(model.tables, rows[2:4, 13:]),  # any slice, same hash
                                  scoring._token_log_probs_numpy(model.tables, rows[2:4, 13:]))


def test_without_the_compiled_scorer_scoring_falls_back_to_numpy(monkeypatch):
    model = fit_ngram(stream_runs(np.arange(200) % 17), 3, 20, "kn")
    rows = np.arange(60).reshape(3, 20) % 19
    fast = scoring.token_log_probs(model.tables, rows)
    monkeypatch.setattr(scoring, "compiled", lambda library: None)
    np.testing.assert_array_equal(scoring.token_log_probs(model.tables, rows), fast)


@pytest.mark.parametrize("bad", [20, -1])
def test_ids_outside_the_vocabulary_are_refused(bad):
    model = fit_ngram(stream_runs(np.arange(200) % 17), 3, 20, "kn")
    with pytest.raises(LmlabError, match=r"token ids must lie in \[0, 20\)"):
        scoring.token_log_probs(model.tables, np.array([[1, 2, bad]]))
