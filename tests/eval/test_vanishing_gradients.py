"""The vanishing-gradient measurement: an Elman RNN's gradient decays faster with distance than an
LSTM's, and `lmlab experiment vanishing-gradients` writes its table, JSON and plot."""

import json

import pytest
import torch

from conftest import lmlab, one_line_error
from lmlab.eval.vanishing_gradients import decay_per_step, gradient_norms_by_distance
from lmlab.models.rnn import RNNLM, RNNConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def decay(cell: str, seed: int) -> float:
    torch.manual_seed(seed)
    model = RNNLM(RNNConfig(cell, vocab_size=100, d_model=32, hidden=32, n_layers=1))
    ids = torch.randint(0, 100, (16, 31), generator=torch.Generator().manual_seed(seed))
    return decay_per_step(gradient_norms_by_distance(model, ids))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rnn_gradient_decays_faster_than_the_lstm_gradient(seed):
    assert decay("rnn", seed) < decay("lstm", seed) - 0.1


def test_decay_per_step_reads_a_geometric_sequence():
    assert decay_per_step(0.5 ** torch.arange(10.0).numpy()) == pytest.approx(0.5)


def test_gradient_norms_are_one_per_distance_and_the_model_keeps_its_mode():
    model = RNNLM(RNNConfig("gru", vocab_size=50, d_model=8, hidden=8, dropout=0.5)).train()
    norms = gradient_norms_by_distance(model, torch.randint(0, 50, (4, 7)))
    assert norms.shape == (6,) and (norms > 0).all() and model.training


def test_cli_writes_table_json_and_plot(tmp_path, corpus_file, capsys):
    out = tmp_path / "vg"
    assert lmlab("experiment", "vanishing-gradients", "--out", out, "--data", corpus_file, "--steps-back", "6",
                 "--train-steps", "2", "--hidden", "8", "--vocab-size", "300") == 0
    printed = capsys.readouterr().out
    assert "| rnn init |" in printed and "| lstm trained |" in printed
    results = json.loads((out / "vanishing_gradients.json").read_text())
    assert results["steps_back"] == list(range(7))
    assert set(results["grad_norm"]) == {f"{c} {s}" for c in ("rnn", "lstm", "gru") for s in ("init", "trained")}
    assert (out / "vanishing_gradients.png").read_bytes().startswith(b"\x89PNG")
    assert lmlab("experiment", "vanishing-gradients", "--out", out, "--data", corpus_file) == 2
    one_line_error(capsys, "already holds an experiment")
