"""N-gram estimators: Kneser-Ney and modified KN equal probabilities computed by hand on a tiny corpus;
every normalized estimator sums to 1 after any context; stupid backoff does not, and says so."""

import math

import numpy as np
import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.models.ngram import NGramConfig, Vocabulary, fit_ngram, sentence_runs, stream_runs
from lmlab.models.ngram.scoring import next_log_probs, token_log_probs

# Six sentences; with <s> and </s> they hold 17 bigrams.
CORPUS = ["b a c", "c c a", "a", "b c", "a", "a"]
SENTENCES = [line.split() for line in CORPUS]
VOCAB = Vocabulary.from_sentences(SENTENCES)  # <unk> <s> </s> b a c: V = 6
V = 6


def _fit(order, smoothing, **settings):
    runs = sentence_runs([VOCAB.encode(s) for s in SENTENCES], VOCAB.bos_id, VOCAB.eos_id)
    return fit_ngram(runs, order, len(VOCAB), smoothing, **settings)


def _prob(model, context, word):
    """P(word | context words) from the model's whole next-word distribution."""
    ids = np.array([VOCAB.encode(context.split())])
    return float(np.exp(next_log_probs(model.tables, ids, last_only=True)[0, VOCAB.encode([word])[0]]))


# Bigram counts c(h w), by hand:
#   <s> b 2   <s> c 1   <s> a 3   b a 1   b c 1   a c 1   a </s> 4   c </s> 2   c c 1   c a 1
#   c(<s> .) = 6, c(a .) = 5, c(b .) = 2, c(c .) = 4
#   counts-of-counts: n1 = 6 (<s> c, b a, b c, a c, c c, c a), n2 = 2, n3 = 1, n4 = 1
# Continuation counts N1+(. w) (distinct words before w):
#   a: <s> b c -> 3   b: <s> -> 1   c: <s> b a c -> 4   </s>: a c -> 2   (<s>, <unk>: 0); sum 10
#   counts-of-counts: n1 = n2 = n3 = n4 = 1
BIGRAM_D = 6 / (6 + 2 * 2)  # 0.6
UNIGRAM_D = 1 / (1 + 2 * 1)  # 1/3
CONTINUATION = {"a": 3, "b": 1, "c": 4, "</s>": 2, "<s>": 0, "<unk>": 0}


def _kn_unigram(word):
    # 4 word types are seen, so the uniform distribution receives D * 4 / 10 of the mass
    return max(CONTINUATION[word] - UNIGRAM_D, 0) / 10 + UNIGRAM_D * 4 / 10 / V


def test_kneser_ney_bigram_equals_the_hand_computation():
    model = _fit(2, "kn")
    assert model.config.discounts == ((pytest.approx(UNIGRAM_D),), (pytest.approx(BIGRAM_D),))
    lam_a = BIGRAM_D * 2 / 5  # "a" is followed by 2 distinct words in 5 bigrams
    assert _prob(model, "a", "</s>") == pytest.approx((4 - BIGRAM_D) / 5 + lam_a * _kn_unigram("</s>"), rel=1e-6)
    assert _prob(model, "a", "c") == pytest.approx((1 - BIGRAM_D) / 5 + lam_a * _kn_unigram("c"), rel=1e-6)
    assert _prob(model, "a", "b") == pytest.approx(lam_a * _kn_unigram("b"), rel=1e-6)
    assert _prob(model, "a", "<unk>") == pytest.approx(lam_a * UNIGRAM_D * 4 / 10 / V, rel=1e-6)
    lam_s = BIGRAM_D * 3 / 6  # "<s>" is followed by 3 distinct words in 6 bigrams
    assert _prob(model, "<s>", "a") == pytest.approx((3 - BIGRAM_D) / 6 + lam_s * _kn_unigram("a"), rel=1e-6)
    assert _kn_unigram("a") == pytest.approx((3 - 1 / 3) / 10 + (4 / 30) / 6)  # 0.28889: the arithmetic, spelled out


def test_modified_kneser_ney_bigram_equals_the_hand_computation():
    model = _fit(2, "mkn")
    # bigrams: Y = 6 / (6 + 2*2) = 0.6; D1 = 1 - 2Y n2/n1 = 0.6; D2 = 2 - 3Y n3/n2 = 1.1; D3+ = 3 - 4Y n4/n3 = 0.6
    d1, d2, d3 = 1 - 2 * 0.6 * 2 / 6, 2 - 3 * 0.6 * 1 / 2, 3 - 4 * 0.6 * 1 / 1
    # unigrams (continuation counts): Y = 1/3; D1 = 1 - 2/3 = 1/3; D2 = 2 - 1 = 1; D3+ = 3 - 4/3 = 5/3
    u1, u2, u3 = 1 - 2 / 3, 2 - 3 / 3, 3 - 4 / 3
    assert model.config.discounts[1] == pytest.approx((d1, d2, d3))
    assert model.config.discounts[0] == pytest.approx((u1, u2, u3))
    # unigram: b has 1 continuation (D1), </s> 2 (D2), a 3 and c 4 (D3+); uniform weight = removed mass / 10
    uniform = (u1 + u2 + 2 * u3) / 10 / V
    unigram = {"a": (3 - u3) / 10 + uniform, "c": (4 - u3) / 10 + uniform, "b": (1 - u1) / 10 + uniform,
               "</s>": (2 - u2) / 10 + uniform}
    # after "a": a c (1 time, D1), a </s> (4 times, D3+); lambda = (D1 + D3+) / 5
    lam_a = (d1 + d3) / 5
    assert _prob(model, "a", "c") == pytest.approx((1 - d1) / 5 + lam_a * unigram["c"], rel=1e-6)
    assert _prob(model, "a", "</s>") == pytest.approx((4 - d3) / 5 + lam_a * unigram["</s>"], rel=1e-6)
    assert _prob(model, "a", "b") == pytest.approx(lam_a * unigram["b"], rel=1e-6)
    # after "<s>": <s> b (2, D2), <s> c (1, D1), <s> a (3, D3+); lambda = (D1 + D2 + D3+) / 6
    lam_s = (d1 + d2 + d3) / 6
    assert _prob(model, "<s>", "b") == pytest.approx((2 - d2) / 6 + lam_s * unigram["b"], rel=1e-6)
    assert _prob(model, "<s>", "<unk>") == pytest.approx(lam_s * uniform, rel=1e-6)


def test_kneser_ney_trigram_uses_continuation_counts_for_bigrams_and_raw_counts_after_bos():
    model = _fit(3, "kn")
    # trigram counts: <s> a </s> 3, and 8 others once: n1 = 8, n2 = 0 -> D3 = 8 / 8 = 1
    # bigram adjusted counts: N1+(. g), but raw counts for "<s> .":
    #   <s> b 2, <s> c 1, <s> a 3, b a 1, a c 1, c </s> 2 (after a, b), c c 1, c a 1, a </s> 2 (after c, <s>), b c 1
    #   n1 = 6, n2 = 3 -> D2 = 6 / 12 = 0.5
    d3, d2 = 1.0, 0.5
    assert model.config.discounts[1:] == ((pytest.approx(d2),), (pytest.approx(d3),))
    p1_end = _kn_unigram("</s>")
    p2_end_after_a = (2 - d2) / 3 + d2 * 2 / 3 * p1_end  # "a ." adjusted: a c 1, a </s> 2
    # "<s> a" is followed by </s> 3 times, by nothing else
    assert _prob(model, "<s> a", "</s>") == pytest.approx((3 - d3) / 3 + d3 * 1 / 3 * p2_end_after_a, rel=1e-6)
    p2_c_after_a = (1 - d2) / 3 + d2 * 2 / 3 * _kn_unigram("c")
    assert _prob(model, "b a", "c") == pytest.approx((1 - d3) / 1 + d3 * 1 / 1 * p2_c_after_a, rel=1e-6)


def test_add_k_and_mle_equal_their_formulas():
    assert _prob(_fit(2, "mle"), "a", "</s>") == pytest.approx(4 / 5)
    assert _prob(_fit(2, "mle"), "a", "b") == 0.0
    assert _prob(_fit(2, "addk", k=0.5), "a", "</s>") == pytest.approx((4 + 0.5) / (5 + 0.5 * V))
    assert _prob(_fit(2, "addk"), "a", "b") == pytest.approx(1 / (5 + V))
    assert _prob(_fit(2, "addk"), "<unk>", "b") == pytest.approx(1 / V)  # an unseen context: uniform


@pytest.mark.parametrize("smoothing", ["kn", "mkn", "addk", "mle"])
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_each_normalized_estimator_sums_to_one_after_any_context(smoothing, order):
    rng = np.random.default_rng(order)
    model = fit_ngram(stream_runs(rng.integers(0, 9, 400)), order, 12, smoothing)
    contexts = np.concatenate([rng.integers(0, 12, (6, 5)), rng.integers(0, 9, (6, 5))])  # seen and unseen ids
    probs = np.exp(next_log_probs(model.tables, contexts).astype(np.float64))  # (12, 5, V)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)


def test_kneser_ney_gives_every_token_a_nonzero_probability():
    model = fit_ngram(stream_runs(np.array([1, 2, 3, 1, 2, 3, 1, 2])), 3, 10, "kn")
    assert np.isfinite(next_log_probs(model.tables, np.array([[1, 2, 9, 3]]))).all()


def test_stupid_backoff_is_not_normalized_and_refuses_perplexity():
    model = _fit(3, "stupid")
    ids = np.array([VOCAB.encode("<s> a c".split())])
    totals = np.exp(next_log_probs(model.tables, ids).astype(np.float64)).sum(-1)
    assert not np.allclose(totals, 1.0)
    assert _prob(model, "b a", "c") == pytest.approx(1.0)  # c(b a c) / c(b a .)
    assert _prob(model, "b a", "</s>") == pytest.approx(0.4 * 4 / 5)  # one backoff, to c(a </s>) / c(a .)
    assert _prob(model, "b a", "b") == pytest.approx(0.4 * 0.4 * (2 + 1) / (17 + V))  # two, to (c(b) + 1) / (N + V)
    with pytest.raises(LmlabError, match="stupid backoff gives scores, not probabilities"):
        model(torch.tensor([[1, 4]]))


def test_fast_token_scores_equal_the_full_distributions():
    rng = np.random.default_rng(0)
    model = fit_ngram(stream_runs(rng.integers(0, 7, 500)), 4, 9, "mkn")
    ids = rng.integers(0, 9, (3, 12))
    full = next_log_probs(model.tables, ids)  # (3, 12, V)
    picked = np.take_along_axis(full[:, :-1], ids[:, 1:, None], axis=2)[..., 0]
    np.testing.assert_allclose(token_log_probs(model.tables, ids)[:, 1:], picked, atol=1e-5)


def test_step_by_step_gives_the_forward_logits():
    rng = np.random.default_rng(1)
    model = fit_ngram(stream_runs(rng.integers(0, 7, 500)), 3, 9, "kn")
    ids = torch.tensor(rng.integers(0, 9, (2, 6)))
    logits = model(ids)  # (2, 6, V)
    state = model.initial_state(2)
    for t in range(6):
        step_logits, state = model.step(ids[:, t:t + 1], state)
        torch.testing.assert_close(step_logits, logits[:, t])
    assert state.shape == (2, 2)


@pytest.mark.parametrize("settings, message", [
    (dict(order=0, smoothing="kn"), "order 0 must be at least 1"),
    (dict(order=3, smoothing="witten-bell"), "smoothing 'witten-bell' is unknown"),
    (dict(order=3, smoothing="addk", k=0.0), "add-k needs k > 0"),
    (dict(order=3, smoothing="kn", discount=1.5), r"discount 1.5 must lie in \(0, 1\]"),
    (dict(order=3, smoothing="mkn", discount=0.5), "a fixed discount is for --smoothing kn"),
])
def test_bad_model_settings_are_one_clear_error(settings, message):
    with pytest.raises(LmlabError, match=message):
        fit_ngram(stream_runs(np.array([1, 2, 3, 1])), vocab_size=5, **settings)


def test_config_refuses_a_context_too_short_for_the_order():
    with pytest.raises(LmlabError, match="context_length 4 must be at least"):
        NGramConfig(5, "kn", 10, context_length=4)
    assert math.isfinite(NGramConfig(5, "kn", 10, context_length=8).context_length)
