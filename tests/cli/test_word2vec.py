"""`lmlab word2vec ...` end to end, and its bad inputs: one line, exit code 2, nothing written."""

import json
import sys

import numpy as np
import pytest

from conftest import lmlab, one_line_error
from lmlab.data.analogies import analogy_corpus
from lmlab.eval.word_similarity import read_pairs
from lmlab.models.word2vec.vectors import load_vectors

pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = ["--dim", "16", "--epochs", "2", "--min-count", "2", "--batch-size", "256"]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("w2v") / "corpus.txt"
    path.write_text("\n\n".join(analogy_corpus(2000, seed=4)))
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory, text_file):
    out = tmp_path_factory.mktemp("w2v") / "model"
    assert lmlab("word2vec", "train", "--data", text_file, "--out", out, *SMALL) == 0
    return out


def test_train_writes_vectors_vocab_and_config(model):
    assert {p.name for p in model.iterdir()} == {"vectors.safetensors", "vocab.txt", "config.json", ".lmlab"}
    config = json.loads((model / "config.json").read_text())
    assert config["model_type"] == "word2vec" and config["dim"] == 16 and config["method"] == "sgns"


def test_neighbors_prints_k_words_with_cosines(model, capsys):
    capsys.readouterr()
    assert lmlab("word2vec", "neighbors", "--model", model, "--word", "Paris", "--top", "4") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(-1 <= float(line.split()[0]) <= 1 for line in lines)
    assert "paris" not in [line.split()[1] for line in lines]


def test_analogy_and_similarity_answer(model, capsys):
    capsys.readouterr()
    assert lmlab("word2vec", "analogy", "--model", model, "man", "king", "woman", "--top", "2") == 0
    answers = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert len(answers) == 2 and not {"man", "king", "woman"} & set(answers)
    assert lmlab("word2vec", "similarity", "--model", model, "cat", "cat") == 0
    assert float(capsys.readouterr().out) == pytest.approx(1.0, abs=1e-5)


def test_evaluate_reports_every_section_and_reads_a_question_file(model, tmp_path, capsys):
    capsys.readouterr()
    assert lmlab("word2vec", "evaluate", "--model", model, "--json") == 0
    scores = json.loads(capsys.readouterr().out)["analogies"]
    assert {"capital-country", "present-past", "total"} <= set(scores)
    questions = tmp_path / "q.txt"
    questions.write_text(": mine\nparis france rome italy\nparis france rome dragon\n")
    assert lmlab("word2vec", "evaluate", "--model", model, "--questions", questions, "--json") == 0
    mine = json.loads(capsys.readouterr().out)["analogies"]["mine"]
    assert mine["asked"] == 1 and mine["skipped"] == 1


def test_unknown_word_says_which(model, capsys):
    capsys.readouterr()
    assert lmlab("word2vec", "analogy", "--model", model, "man", "dragon", "woman") == 2
    one_line_error(capsys, "'dragon' is not in the vocabulary")


@pytest.mark.parametrize("flags, fragment", [(["--dim", "0"], "--dim"), (["--window", "0"], "--window"),
                                             (["--min-count", "100000"], "min-count")])
def test_bad_training_settings_write_nothing(text_file, tmp_path, capsys, flags, fragment):
    out = tmp_path / "m"
    assert lmlab("word2vec", "train", "--data", text_file, "--out", out, *SMALL, *flags) == 2
    one_line_error(capsys, fragment)
    assert not out.exists()


def test_text_without_words_is_an_empty_vocabulary_error(tmp_path, capsys):
    empty = tmp_path / "dots.txt"
    empty.write_text("... !!! ???\n")
    assert lmlab("word2vec", "train", "--data", empty, "--out", tmp_path / "m") == 2
    one_line_error(capsys, "no word occurs")
    assert not (tmp_path / "m").exists()


def test_out_that_is_another_kind_of_directory_is_refused(text_file, tmp_path, capsys):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    assert lmlab("word2vec", "train", "--data", text_file, "--out", other, *SMALL) == 2
    one_line_error(capsys, "--out", "lmlab did not write")
    assert (other / "keep.txt").read_text() == "mine"


def test_model_that_is_not_a_word2vec_directory_is_an_error(tmp_path, capsys):
    assert lmlab("word2vec", "neighbors", "--model", tmp_path, "--word", "a") == 2
    one_line_error(capsys, "not a word2vec model directory")


@pytest.mark.parametrize("binary", [False, True])
def test_export_is_read_by_gensim_and_import_reads_it_back(model, tmp_path, capsys, binary):
    keyed_vectors = pytest.importorskip("gensim.models").KeyedVectors
    exported = tmp_path / ("vectors.bin" if binary else "vectors.txt")
    assert lmlab("word2vec", "export", "--model", model, "--out", exported, *(["--binary"] if binary else [])) == 0
    ours = load_vectors(model)
    theirs = keyed_vectors.load_word2vec_format(str(exported), binary=binary)
    assert theirs.index_to_key == list(ours.vocab.words[1:])  # every word but <unk>, in lmlab's order
    atol = 0 if binary else 1e-5  # text: six significant digits
    assert np.allclose(theirs.vectors, ours.vectors[1:].numpy(), rtol=1e-5, atol=atol)
    assert theirs.most_similar("paris", topn=3)[0][0] == ours.neighbors("paris", 1)[0][0]
    assert lmlab("word2vec", "import", "--data", exported, "--out", tmp_path / "back") == 0
    back = load_vectors(tmp_path / "back")
    assert back.vocab.words == ours.vocab.words
    assert np.allclose(back.vectors[1:].numpy(), ours.vectors[1:].numpy(), rtol=1e-5, atol=atol)


def test_import_reads_what_gensim_writes(tmp_path):
    keyed_vectors = pytest.importorskip("gensim.models").KeyedVectors
    kv = keyed_vectors(vector_size=4)
    kv.add_vectors(["alpha", "beta", "gamma"], np.arange(12, dtype=np.float32).reshape(3, 4))
    for binary in (False, True):
        path = tmp_path / f"g{binary}.w2v"
        kv.save_word2vec_format(str(path), binary=binary)
        out = tmp_path / f"m{binary}"
        assert lmlab("word2vec", "import", "--data", path, "--out", out) == 0
        vectors = load_vectors(out)
        assert vectors.vocab.words == ("<unk>", "alpha", "beta", "gamma")
        assert np.array_equal(vectors.vectors[1:].numpy(), kv.vectors)


@pytest.mark.parametrize("content, fragment", [
    (b"3 4\nalpha 1 2 3 4\n", "has 1 rows but its header declares 3"),
    (b"100000000 400\n", "declares 100000000 words of 400 numbers"),
    (b"hello world\n", "does not start with a word2vec header"),
    (b"2 2\nalpha 1 2\nalpha 3 4\n", "lists a word twice"),
    (b"1 2\nalpha nan 1\n", "not finite"),
    (b"1 3\nalpha 1 2\n", "has 2 numbers, not the header's 3"),
    (b"2 2\nalpha \x00\x00\x80?\x00\x00\x00@\n", "ends at word 2 of the 2"),
])
def test_a_bad_word2vec_file_is_one_line_and_writes_nothing(tmp_path, capsys, content, fragment):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    assert lmlab("word2vec", "import", "--data", bad, "--out", tmp_path / "out") == 2
    one_line_error(capsys, fragment)
    assert not (tmp_path / "out").exists()


def test_word_similarity_gives_gensims_correlations_on_its_real_benchmarks(tmp_path, capsys):
    """Random vectors for every word of gensim's WordSim-353 and SimLex-999: lmlab's Spearman and Pearson
    correlations and skipped pairs equal gensim's evaluate_word_pairs on the same vectors."""
    gensim_models = pytest.importorskip("gensim.models")
    from gensim.test.utils import datapath
    files = [datapath("wordsim353.tsv"), datapath("simlex999.txt")]
    words = sorted({w for f in files for a, b, _ in read_pairs(f) for w in (a, b)})[:-40]  # 40 words left out
    kv = gensim_models.KeyedVectors(vector_size=8)
    kv.add_vectors(words, np.random.default_rng(0).standard_normal((len(words), 8)).astype(np.float32))
    kv.save_word2vec_format(str(tmp_path / "v.txt"))
    assert lmlab("word2vec", "import", "--data", tmp_path / "v.txt", "--out", tmp_path / "m") == 0
    capsys.readouterr()
    assert lmlab("word2vec", "evaluate", "--model", tmp_path / "m", "--gensim-benchmarks", "--json") == 0
    ours = json.loads(capsys.readouterr().out)
    assert ours["analogies"]["total"]["asked"] > 0
    for name, path in zip(("wordsim353", "simlex999"), files):
        pearson, spearman, oov_percent = kv.evaluate_word_pairs(path)
        # Spearman ranks the cosines: two nearly equal ones may rank either way after float32 rounding of the
        # unit vectors (gensim normalizes its own way), which moves the correlation by a few 1e-6.
        assert ours["word_pairs"][name]["spearman"] == pytest.approx(spearman.statistic, abs=1e-4)
        assert ours["word_pairs"][name]["pearson"] == pytest.approx(pearson.statistic, abs=1e-6)
        total = ours["word_pairs"][name]["pairs"] + ours["word_pairs"][name]["skipped"]
        assert ours["word_pairs"][name]["skipped"] / total * 100 == pytest.approx(oov_percent)


def test_a_bad_pairs_file_and_missing_gensim_are_one_line(model, tmp_path, capsys, monkeypatch):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("# a comment\ncat dog\n")
    assert lmlab("word2vec", "evaluate", "--model", model, "--pairs", pairs) == 2
    one_line_error(capsys, "pairs.txt:2 is not 'word1 word2 score'")
    monkeypatch.setitem(sys.modules, "gensim.test.utils", None)  # the import fails, as without gensim
    assert lmlab("word2vec", "evaluate", "--model", model, "--gensim-benchmarks") == 2
    one_line_error(capsys, "pip install gensim")
