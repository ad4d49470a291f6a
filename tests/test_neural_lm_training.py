"""Training the window and RNN LMs with truncated BPTT: streams, exact resumption, run outputs."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from lmlab.data.streams import parallel_streams
from lmlab.errors import LmlabError
from lmlab.models.rnn import RNNConfig
from lmlab.models.window import WindowConfig
from lmlab.recipes.neural_lm import train_neural_lm

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = {
    "window": WindowConfig(vocab_size=300, window=3, d_model=8, hidden=16, dropout=0.1),
    "rnn": RNNConfig("rnn", vocab_size=300, d_model=8, hidden=16, n_layers=2),
    "lstm": RNNConfig("lstm", vocab_size=300, d_model=16, hidden=16, n_layers=2, dropout=0.2, tie_embeddings=True),
    "gru": RNNConfig("gru", vocab_size=300, d_model=8, hidden=16, n_layers=1),
}


def test_streams_continue_row_by_row_across_batches_and_keep_true_pairs():
    tokens = np.arange(101)  # token i is followed by i + 1
    streams = parallel_streams(tokens, np.array([0, 20, 50, 60, 80]), block_size=10, n_streams=2)
    assert streams.chunks_per_epoch == 2
    first, targets = streams.chunk(0)
    second, _ = streams.chunk(1)
    assert torch.equal(targets, first + 1)
    assert first[0].tolist() == list(range(10)) and second[0].tolist() == list(range(20, 30))
    assert first[1].tolist() == list(range(55, 60)) + list(range(60, 65))  # row 1 goes on where row 0 ends
    assert torch.equal(streams.chunk(2)[0], first)  # the second epoch starts over
    assert streams.starts_epoch(2) and not streams.starts_epoch(3)
    with pytest.raises(LmlabError, match="cannot fill 6 streams"):
        parallel_streams(tokens, np.array([0, 20]), block_size=10, n_streams=6)


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_resume_gives_bit_identical_weights(tmp_path, corpus_file, tiny_train, arch):
    cfg, train = CONFIGS[arch], tiny_train.replace(block_size=8)
    train_neural_lm(cfg, train, str(corpus_file), tmp_path / "full", show_progress=False)
    first = train_neural_lm(cfg, train, str(corpus_file), tmp_path / "split", stop_after=3, show_progress=False)
    assert first.interrupted and first.step == 3 and first.model_dir is None
    second = train_neural_lm(cfg, train, str(corpus_file), tmp_path / "split", resume=True, show_progress=False)
    assert second.step == 6 and not second.interrupted
    full = load_file(tmp_path / "full" / "model" / "model.safetensors")
    split = load_file(tmp_path / "split" / "model" / "model.safetensors")
    assert full.keys() == split.keys()
    assert all(torch.equal(full[k], split[k]) for k in full)


def test_resume_needs_the_carried_state(tmp_path, corpus_file, tiny_train):
    """Dropping the checkpointed state (as if it were not saved) changes the resumed weights."""
    cfg, train = CONFIGS["gru"], tiny_train.replace(block_size=8, max_steps=4)
    train_neural_lm(cfg, train, str(corpus_file), tmp_path / "full", show_progress=False)
    train_neural_lm(cfg, train, str(corpus_file), tmp_path / "split", stop_after=2, show_progress=False)
    path = tmp_path / "split" / "checkpoints" / "step_0000002.pt"
    ckpt = torch.load(path, weights_only=False)
    ckpt["carried_state"] = [torch.zeros_like(part) for part in ckpt["carried_state"]]
    torch.save(ckpt, path)
    train_neural_lm(cfg, train, str(corpus_file), tmp_path / "split", resume=True, show_progress=False)
    full = load_file(tmp_path / "full" / "model" / "model.safetensors")
    split = load_file(tmp_path / "split" / "model" / "model.safetensors")
    assert not all(torch.equal(full[k], split[k]) for k in full)


@pytest.mark.parametrize("arch", ["window", "lstm"])
def test_training_lowers_validation_loss(tmp_path, corpus_file, tiny_train, arch):
    train = tiny_train.replace(max_steps=40, eval_every=5, lr=1e-2, block_size=16)
    train_neural_lm(CONFIGS[arch], train, str(corpus_file), tmp_path / "r", show_progress=False)
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    val = [r["val_loss"] for r in rows if "val_loss" in r]
    assert val[-1] < val[0] - 1.0


def test_run_directory_holds_model_metrics_curve_and_checkpoints(tmp_path, corpus_file, tiny_train):
    run = tmp_path / "run"
    train_neural_lm(CONFIGS["lstm"], tiny_train, str(corpus_file), run, show_progress=False)
    assert {p.name for p in (run / "model").iterdir()} == {"config.json", "model.safetensors", "tokenizer.json"}
    config = json.loads((run / "model" / "config.json").read_text())
    assert config["model_type"] == "rnn" and config["cell"] == "lstm"
    assert (run / "loss.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_0000004.pt", "step_0000006.pt"]
    assert not list(run.rglob("*.tmp"))


def test_resume_with_a_different_model_is_refused(tmp_path, corpus_file, tiny_train):
    train_neural_lm(CONFIGS["gru"], tiny_train, str(corpus_file), tmp_path / "r", stop_after=2, show_progress=False)
    with pytest.raises(LmlabError, match="different config.*hidden"):
        train_neural_lm(RNNConfig("gru", vocab_size=300, d_model=8, hidden=32, n_layers=1), tiny_train,
                        str(corpus_file), tmp_path / "r", resume=True, show_progress=False)
