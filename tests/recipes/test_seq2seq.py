"""Training the encoder-decoder: it learns, its run directory is complete, and it resumes exactly."""

import json

import pytest
import torch
from safetensors.torch import load_file

from lmlab.config import LoopConfig
from lmlab.errors import LmlabError
from lmlab.models.seq2seq.files import load_seq2seq_dir
from lmlab.recipes.seq2seq import Seq2SeqTrainConfig, score_pairs, task_test_pairs, train_seq2seq
from lmlab.training.checkpoint import list_checkpoints

pytestmark = pytest.mark.usefixtures("one_thread")

REVERSE = Seq2SeqTrainConfig(task="reverse", train_size=2000, val_size=100, test_size=200, embed_dim=16, hidden=48,
                             attention_dim=16,
                             loop=LoopConfig(max_steps=100, batch_size=32, eval_every=100, checkpoint_every=100,
                                             keep_checkpoints=2, log_every=10),
                             optim=Seq2SeqTrainConfig.optim.replace(lr=1e-2, warmup_steps=10))
TINY = REVERSE.replace(train_size=200, val_size=20, test_size=20, hidden=16,
                       loop=REVERSE.loop.replace(max_steps=6, eval_every=3, checkpoint_every=2, log_every=1),
                       dropout=0.1)


def test_tiny_model_learns_to_reverse_four_digits(tmp_path):
    result = train_seq2seq(REVERSE, tmp_path / "run", show_progress=False)
    assert result.finished and result.test["test_seq_acc"] >= 0.9
    trained = load_seq2seq_dir(tmp_path / "run")
    assert score_pairs(trained, task_test_pairs(trained))["seq_acc"] == result.test["test_seq_acc"]


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_resume_gives_bit_identical_weights(tmp_path, attention):
    cfg = TINY.replace(attention=attention)
    train_seq2seq(cfg, tmp_path / "full", show_progress=False)
    first = train_seq2seq(cfg, tmp_path / "split", stop_after=3, show_progress=False)
    assert not first.finished and first.step == 3 and first.model_dir is None
    second = train_seq2seq(cfg, tmp_path / "split", resume=True, show_progress=False)
    assert second.finished and second.step == 6
    full, split = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("full", "split"))
    assert full.keys() == split.keys() and all(torch.equal(full[k], split[k]) for k in full)
    rows = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4, 5, 6]


def test_run_directory_holds_model_metrics_curves_and_last_checkpoints(tmp_path):
    result = train_seq2seq(TINY, tmp_path, show_progress=False)
    assert {p.name for p in (tmp_path / "model").iterdir()} == {".lmlab", "config.json", "model.safetensors"}
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["step_0000004.pt", "step_0000006.pt"]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "val_seq_acc" in r] == [3, 6]
    assert {"val_loss", "val_char_acc"} <= rows[2].keys()
    assert rows[-1].keys() == {"step", "test_seq_acc", "test_char_acc", "test_n"} and rows[-1]["test_n"] == 20
    assert result.test == {k: v for k, v in rows[-1].items() if k != "step"}
    for png in ("loss.png", "accuracy.png"):
        assert (tmp_path / png).read_bytes().startswith(b"\x89PNG")
    assert not list(tmp_path.rglob("*.tmp"))


def test_resume_with_a_different_config_is_refused(tmp_path):
    train_seq2seq(TINY, tmp_path, stop_after=2, show_progress=False)
    with pytest.raises(LmlabError, match="hidden: 16 in the checkpoint, 32 now"):
        train_seq2seq(TINY.replace(hidden=32), tmp_path, resume=True, show_progress=False)
    with pytest.raises(LmlabError, match="already holds a run"):
        train_seq2seq(TINY, tmp_path, show_progress=False)


@pytest.mark.slow
def test_attention_model_normalises_dates(tmp_path):
    """The full date task: a few minutes on one core."""
    cfg = Seq2SeqTrainConfig(loop=LoopConfig(max_steps=1200, batch_size=64, eval_every=400, checkpoint_every=400,
                                             keep_checkpoints=2), val_size=200, test_size=500)
    result = train_seq2seq(cfg, tmp_path, show_progress=False)
    assert result.test["test_seq_acc"] >= 0.95
