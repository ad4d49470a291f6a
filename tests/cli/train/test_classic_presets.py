"""`lmlab train --model PRESET` for the classic presets of the registry: window and RNN presets train
as their --arch with the preset's sizes, n-gram presets count with the preset's order and smoothing,
and the other classic families point to their own command."""

import json

import pytest

from conftest import lmlab, one_line_error

pytestmark = pytest.mark.usefixtures("one_thread")


def test_an_rnn_preset_trains_with_its_cell_and_the_sizes_the_flags_change(tmp_path, corpus_file):
    assert lmlab("train", "--model", "gru-small", "--data", corpus_file, "--out", tmp_path, "--max-steps", "2",
                 "--d-model", "32", "--hidden", "48", "--batch-size", "4", "--block-size", "16") == 0
    model = json.loads((tmp_path / "run.json").read_text())["model"]
    assert (model["cell"], model["d_model"], model["hidden"], model["n_layers"]) == ("gru", 32, 48, 2)
    assert (tmp_path / "model" / "config.json").is_file()


def test_an_ngram_preset_counts_with_its_order_and_smoothing(tmp_path, corpus_file):
    assert lmlab("train", "--model", "bigram-laplace", "--data", corpus_file, "--out", tmp_path) == 0
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert (config["order"], config["smoothing"], config["add_k"]) == (2, "addk", 1.0)


@pytest.mark.parametrize("flags, fragments", [
    (["--model", "seq2seq-dot"], ["seq2seq-dot is a seq2seq-rnn preset", "use `lmlab seq2seq train`"]),
    (["--model", "lstm-small", "--window", "3"], ["--window does not apply to --arch lstm"]),
    (["--model", "trigram-kn", "--lr", "0.1"], ["--lr does not apply to --arch ngram"]),
])
def test_flags_a_classic_preset_does_not_take_are_one_line(tmp_path, capsys, corpus_file, flags, fragments):
    assert lmlab("train", "--data", corpus_file, "--out", tmp_path / "run", *flags) == 2
    one_line_error(capsys, *fragments)
    assert not (tmp_path / "run").exists()
