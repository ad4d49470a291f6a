"""ARPA files: lmlab writes what it reads back, kenlm scores lmlab's files as lmlab does, and a corrupt
file is one error line naming the line."""

import math

import numpy as np
import pytest

from lmlab.data.markov import markov_corpus
from lmlab.errors import LmlabError
from lmlab.models.ngram import Vocabulary, fit_ngram, sentence_runs, stream_runs
from lmlab.models.ngram.arpa import read_arpa, write_arpa
from lmlab.models.ngram.scoring import sentence_log_prob, token_log_probs


def _sentences(docs: int, seed: int) -> list[list[str]]:
    """Word-level sentences of the Markov corpus: lower-cased, split at full stops."""
    text = " ".join(markov_corpus(docs, seed=seed)[0]).lower()
    return [s.split() for s in text.split(".") if s.split()]


TRAIN = _sentences(40, seed=0)
TEST = _sentences(3, seed=7)[:12] + [["zini", "unheardof", "ga"], ["qqq"], []]
VOCAB = Vocabulary.from_sentences(TRAIN)


def _word_model(order: int, smoothing: str):
    runs = sentence_runs([VOCAB.encode(s) for s in TRAIN], VOCAB.bos_id, VOCAB.eos_id)
    return fit_ngram(runs, order, len(VOCAB), smoothing)


def _log10_sentence(tables, words, vocabulary) -> float:
    index = {w: i for i, w in enumerate(vocabulary)}
    ids = [index.get(w, index["<unk>"]) for w in words]
    return sentence_log_prob(tables, ids, index["<s>"], index["</s>"]) / math.log(10)


@pytest.mark.parametrize("smoothing", ["kn", "mkn", "addk", "stupid"])
def test_arpa_round_trip_scores_as_the_model(tmp_path, smoothing):
    model = _word_model(3, smoothing)
    write_arpa(model.tables, VOCAB.words, tmp_path / "lm.arpa")
    tables, words = read_arpa(tmp_path / "lm.arpa")
    assert words == list(VOCAB.words) and tables.sizes == model.tables.sizes
    for sentence in TEST:
        assert _log10_sentence(tables, sentence, words) == pytest.approx(
            _log10_sentence(model.tables, sentence, VOCAB.words), abs=1e-5)


def test_arpa_of_a_token_stream_adds_markers_and_reads_back_with_the_vocabulary(tmp_path):
    rng = np.random.default_rng(0)
    model = fit_ngram(stream_runs(rng.integers(0, 12, 2000)), 4, 12, "kn")
    words = [f"t{i}" for i in range(12)]
    write_arpa(model.tables, words, tmp_path / "lm.arpa")
    assert "-99.0\t<s>\n" in (tmp_path / "lm.arpa").read_text()
    tables, read_words = read_arpa(tmp_path / "lm.arpa", {w: i for i, w in enumerate(words)})
    assert read_words == words
    ids = rng.integers(0, 12, (2, 50))
    np.testing.assert_allclose(token_log_probs(tables, ids), token_log_probs(model.tables, ids), atol=1e-5)


@pytest.mark.parity
@pytest.mark.parametrize("smoothing", ["kn", "mkn"])
@pytest.mark.parametrize("order", [2, 3, 5])
def test_kenlm_scores_lmlab_arpa_sentences_as_lmlab(tmp_path, order, smoothing):
    kenlm = pytest.importorskip("kenlm")
    model = _word_model(order, smoothing)
    write_arpa(model.tables, VOCAB.words, tmp_path / "lm.arpa")
    reference = kenlm.Model(str(tmp_path / "lm.arpa"))
    for sentence in TEST:
        assert _log10_sentence(model.tables, sentence, VOCAB.words) == pytest.approx(
            reference.score(" ".join(sentence), bos=True, eos=True), abs=1e-4)


@pytest.mark.parity
def test_kenlm_scores_a_token_stream_arpa_as_lmlab(tmp_path):
    kenlm = pytest.importorskip("kenlm")
    rng = np.random.default_rng(3)
    model = fit_ngram(stream_runs(rng.integers(0, 30, 5000)), 4, 32, "kn")
    words = [f"t{i}" for i in range(32)]
    write_arpa(model.tables, words, tmp_path / "lm.arpa")
    reference = kenlm.Model(str(tmp_path / "lm.arpa"))
    ids = rng.integers(0, 32, (4, 40))
    ours = token_log_probs(model.tables, ids).sum(axis=1) / math.log(10)
    theirs = [reference.score(" ".join(words[i] for i in row), bos=False, eos=False) for row in ids]
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


GOOD = """
\\data\\
ngram 1=4
ngram 2=2

\\1-grams:
-1.0\t<unk>
-99\t<s>\t-0.3
-0.5\t</s>
-0.4\ta\t-0.2

\\2-grams:
-0.2\t<s> a
-0.1\ta </s>

\\end\\
"""


@pytest.mark.parametrize("old, new, line, message", [
    ("\\data\\", "data", 2, "expected '\\\\data\\\\'"),
    ("ngram 2=2", "ngram 2=two", 4, "expected 'ngram 2=COUNT'"),
    ("ngram 1=4", "ngram 1=0", 3, "announces an empty vocabulary"),
    ("-0.4\ta\t-0.2", "-0.4x\ta\t-0.2", 10, "'-0.4x' is not a log10 probability"),
    ("-0.5\t</s>", "0.5\t</s>", 9, "'0.5' is not a log10 probability"),
    ("-0.2\t<s> a", "-0.2\t<s> a b c", 13, "a 2-gram line needs"),
    ("ngram 1=4", "ngram 1=5", 12, "the 1-grams end after 4 of the 5 the header announced"),
    ("ngram 1=4", "ngram 1=3", 10, "the 1-grams go on past the 3 the header announced"),
    ("ngram 2=2", "ngram 2=1", 14, "the 2-grams go on past the 1 the header announced"),
    ("ngram 1=4", "ngram 1=100000000000000", 3, "announces 100000000000000 1-grams, more than the file's"),
    ("ngram 2=2", "ngram 2=40", 4, "announces 40 2-grams, more than the file's"),
    ("ngram 1=4", "ngram 1=" + "9" * 40, 3, "expected 'ngram 1=COUNT'"),
    ("-0.1\ta </s>", "-0.1\tb </s>", 14, "word 'b' is not in the 1-grams"),
    ("-0.1\ta </s>", "-0.2\t<s> a", 14, "is listed twice"),
    ("\\end\\", "", 16, "the file ends before '\\\\end\\\\'"),
])
def test_corrupt_arpa_is_one_line_naming_the_line(tmp_path, old, new, line, message):
    assert old in GOOD
    path = tmp_path / "bad.arpa"
    path.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(LmlabError, match=message) as error:
        read_arpa(path)
    assert f"bad.arpa:{line}:" in str(error.value) and "\n" not in str(error.value)


def test_arpa_bytes_that_are_not_utf8_name_the_line(tmp_path):
    path = tmp_path / "latin1.arpa"
    path.write_bytes(GOOD.replace("-0.4\ta\t-0.2", "-0.4\t\xe9\t-0.2").encode("latin-1"))
    with pytest.raises(LmlabError, match=r"latin1.arpa:10 is not UTF-8 text \(byte 0xe9 at column 6\)"):
        read_arpa(path)


def test_an_absurd_count_is_refused_before_allocating(tmp_path, monkeypatch):
    allocated = []
    monkeypatch.setattr(np, "zeros", lambda *a, **k: allocated.append(a) or np.empty(0))
    path = tmp_path / "huge.arpa"
    path.write_text(GOOD.replace("ngram 2=2", "ngram 2=100000000000000"))
    with pytest.raises(LmlabError, match="more than the file's"):
        read_arpa(path)
    assert allocated == []


def test_the_good_example_reads(tmp_path):
    path = tmp_path / "good.arpa"
    path.write_text(GOOD)
    tables, words = read_arpa(path)
    assert words == ["<unk>", "<s>", "</s>", "a"] and tables.sizes == (4, 2)


def test_a_trigram_without_its_bigram_prefix_is_named(tmp_path):
    text = GOOD.replace("ngram 2=2", "ngram 2=2\nngram 3=1").replace(
        "\\end\\", "\\3-grams:\n-0.1\ta a </s>\n\n\\end\\")
    path = tmp_path / "bad.arpa"
    path.write_text(text)
    with pytest.raises(LmlabError, match=r"bad.arpa:18: the 3-gram 'a a </s>' has no entry for its first 2 word"):
        read_arpa(path)


def test_a_word_outside_the_tokenizer_is_named(tmp_path):
    path = tmp_path / "lm.arpa"
    path.write_text(GOOD)
    with pytest.raises(LmlabError, match=r"lm.arpa:10: word 'a' is not in the tokenizer's vocabulary"):
        read_arpa(path, {"<unk>": 0, "</s>": 1, "b": 2})


def test_a_word_with_whitespace_cannot_be_written(tmp_path):
    model = fit_ngram(stream_runs(np.array([0, 1, 0, 1])), 2, 2, "kn")
    with pytest.raises(LmlabError, match="holds whitespace"):
        write_arpa(model.tables, ["a", "b c"], tmp_path / "x.arpa")
    assert not (tmp_path / "x.arpa").exists()
