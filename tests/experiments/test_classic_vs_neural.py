"""`lmlab experiment classic-vs-neural`: every model reads one tokenizer's tokens and is scored on the same
held-out text; each curve point is the model a plain run gives (an n-gram counted on the same blocks, a neural
checkpoint's weights); a stopped comparison continues to the same numbers; refusals are one line that writes
nothing."""

import json
import math
import shutil

import pytest
import torch

from conftest import lmlab, one_line_error
from lmlab.data.markov import markov_corpus
from lmlab.data.tokens import tokenize_corpus
from lmlab.eval.perplexity import perplexity
from lmlab.experiments import classic_vs_neural
from lmlab.models.load import load
from lmlab.tokenizers.bpe import load_tokenizer
from png_files import read_png

pytestmark = pytest.mark.usefixtures("one_thread")

SMOKE = ["--max-steps", "4", "--points", "2", "--block-size", "16", "--batch-size", "2", "--vocab-size", "300"]


@pytest.fixture(scope="module")
def comparison(corpus_file, tmp_path_factory):
    held_out = tmp_path_factory.mktemp("held") / "held_out.txt"
    held_out.write_text("\n".join(markov_corpus(20, seed=9)[0]))
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    assert lmlab("experiment", "classic-vs-neural", "--out", out, "--data", corpus_file, "--held-out", held_out,
                 "--dropout", "0.1", *SMOKE) == 0
    return out, held_out, json.loads((out / "classic_vs_neural.json").read_text())


def test_every_method_has_a_curve_against_training_tokens(comparison):
    out, _, report = comparison
    results = report["results"]
    assert list(results) == ["kn3", "kn4", "kn5", "mkn5", "window", "lstm", "gru", "transformer"]
    for name in ("kn3", "kn4", "kn5", "mkn5"):  # half the training blocks, then all of them
        (half, _), (whole, _) = results[name]["curve"]
        assert whole == report["train_tokens"] and half == whole // 16 // 2 * 16
    for name in ("window", "lstm", "gru", "transformer"):  # a checkpoint at steps 2 and 4 of 2 x 16 tokens
        assert [x for x, _ in results[name]["curve"]] == [64, 128]
        assert load(out / "runs" / name / "model")[0].config.dropout == 0.1
    assert all(1 < ppl < math.inf for r in results.values() for _, ppl in r["curve"])
    assert all(r["ppl"] < 5 for name, r in results.items() if name in ("kn4", "kn5", "mkn5"))  # a first-order chain of words
    assert results["kn5"]["ppl"] != results["kn3"]["ppl"] != results["mkn5"]["ppl"]
    assert read_png(out / "classic_vs_neural.png").shape == (800, 1000, 3)
    assert "| 5-gram modified KN |" in (out / "classic_vs_neural.md").read_text()


def test_each_point_is_what_a_plain_run_scores(comparison, corpus_file, tmp_path):
    out, held_out, report = comparison
    scored = torch.tensor(tokenize_corpus([held_out.read_text()], load_tokenizer(out / "tokenizer.json")).astype("int64"))
    # the last checkpoint of a neural run holds the weights its saved model has
    lstm, _ = load(out / "runs" / "lstm" / "model")
    assert perplexity(lstm.eval(), scored, 64, 32).perplexity == pytest.approx(report["results"]["lstm"]["ppl"], rel=1e-6)
    # the n-gram on all the training blocks is `lmlab train --arch ngram` on the same data, tokenizer and split
    assert lmlab("train", "--arch", "ngram", "--order", "5", "--smoothing", "mkn", "--data", corpus_file, "--out",
                 tmp_path / "ng", "--tokenizer", out, "--block-size", "16") == 0
    ngram, _ = load(tmp_path / "ng" / "model")
    assert perplexity(ngram, scored, 256).perplexity == pytest.approx(report["results"]["mkn5"]["ppl"], rel=1e-9)


def test_a_stopped_comparison_continues_to_the_same_curves(corpus_file, tmp_path, capsys):
    run = ["experiment", "classic-vs-neural", "--data", corpus_file, "--held-out", "none", "--methods", "kn3", "window",
           *SMOKE]
    assert lmlab(*run, "--out", tmp_path / "whole") == 0
    whole = json.loads((tmp_path / "whole" / "classic_vs_neural.json").read_text())["results"]
    assert lmlab(*run, "--out", tmp_path / "stopped") == 0
    stopped = tmp_path / "stopped"
    # as if stopped after step 2 of 4: no results, no curve, no model, no checkpoint after step 2
    for path in (stopped / "classic_vs_neural.json", stopped / "runs" / "window" / "heldout.json",
                 stopped / "runs" / "window" / "checkpoints" / "step_0000004.pt"):
        path.unlink()
    shutil.rmtree(stopped / "runs" / "window" / "model")
    assert lmlab(*run, "--out", stopped) == 0
    again = json.loads((stopped / "classic_vs_neural.json").read_text())["results"]
    assert [r["curve"] for r in again.values()] == [r["curve"] for r in whole.values()]
    capsys.readouterr()
    assert lmlab(*run, "--out", stopped) == 2
    one_line_error(capsys, "already holds a finished comparison")
    (stopped / "classic_vs_neural.json").unlink()
    assert lmlab(*run[:-1], "3", "--out", stopped) == 2  # another --vocab-size
    one_line_error(capsys, "started with other settings (vocab_size)")


def test_refusals_are_one_line_and_write_nothing(comparison, corpus_file, tmp_path, capsys):
    out, _, _ = comparison
    capsys.readouterr()
    assert lmlab("experiment", "classic-vs-neural", "--out", out, "--data", corpus_file, *SMOKE) == 2
    one_line_error(capsys, "already holds a finished comparison")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    assert lmlab("experiment", "classic-vs-neural", "--out", tmp_path / "other", "--data", corpus_file, *SMOKE) == 2
    one_line_error(capsys, "not an lmlab run directory")
    assert [p.name for p in (tmp_path / "other").iterdir()] == ["notes.txt"]
    fresh = tmp_path / "fresh"
    assert lmlab("experiment", "classic-vs-neural", "--out", fresh, "--data", corpus_file, "--max-steps", "2",
                 "--points", "3") == 2
    one_line_error(capsys, "--points 3 exceeds --max-steps 2")
    assert lmlab("experiment", "classic-vs-neural", "--out", fresh, "--data", corpus_file, "--dropout", "1",
                 *SMOKE) == 2
    one_line_error(capsys, "--dropout 1.0 must lie in [0, 1)")
    assert lmlab("experiment", "classic-vs-neural", "--out", fresh, "--data", corpus_file, "--held-out",
                 tmp_path / "missing.txt", *SMOKE) == 2
    one_line_error(capsys, "missing.txt")
    assert not fresh.exists()


@pytest.mark.parametrize("flags, held_out", [
    (["--data", "mine.txt"], None),  # your own text: scored on its own held-out blocks, no Bible needed
    (["--data", "kjv"], "kjv-held-out"),  # kjv: the books none of the models trained on
    (["--data", "mine.txt", "--held-out", "other.txt"], "other.txt"),
    (["--data", "kjv", "--held-out", "none"], None),
])
def test_the_held_out_text_follows_the_data(monkeypatch, flags, held_out):
    seen = []
    monkeypatch.setattr(classic_vs_neural, "compare_classic_neural", lambda out, s: seen.append(s))
    assert lmlab("experiment", "classic-vs-neural", "--out", "o", *flags) == 0
    assert seen[0].held_out == held_out
