"""The encoder fine-tuning recipe: every task trains and predicts, the best model is kept and loads
back, early stopping, exact resume, truncation, and the embedded sentiment task."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from encoder_data import task_rows, tiny_encoder_dir, write_jsonl
from lmlab.config import LoopConfig
from lmlab.data.encoder_tasks import DEFAULT_COLUMNS, TASKS, Example, read_examples
from lmlab.data.sentiment import sentiment_splits
from lmlab.errors import LmlabError
from lmlab.models.encoder_task_files import load_finetuned
from lmlab.recipes.finetune_encoder import (
    EncoderFinetuneConfig,
    TruncationWarning,
    finetune_encoder,
    keep_best,
    step_examples,
    task_scores,
)
from lmlab.training.checkpoint import list_checkpoints, load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def lr(value: float):
    """The recipe's optimizer settings with learning rate `value`."""
    return EncoderFinetuneConfig().optim.replace(lr=value)


FAST = EncoderFinetuneConfig(epochs=2, loop=LoopConfig(max_steps=None, batch_size=4, log_every=1), optim=lr(1e-3),
                             max_length=32)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    return tiny_encoder_dir(tmp_path_factory.mktemp("enc") / "tiny")


def run(encoder_dir, tmp_path, task, cfg=FAST, **kwargs):
    data = write_jsonl(tmp_path / f"{task}.jsonl", task_rows(task))
    kwargs.setdefault("out", tmp_path / "out")
    return finetune_encoder(str(encoder_dir), task, str(data), eval_data=str(data), cfg=cfg, show_progress=False,
                            **kwargs), data


@pytest.mark.parametrize("task", TASKS)
def test_every_task_trains_saves_and_predicts_what_it_reported(encoder_dir, tmp_path, task):
    result, data = run(encoder_dir, tmp_path, task)
    assert result.finished and result.step == 2 * 3  # 12 examples, batches of 4, 2 epochs
    tuned = load_finetuned(tmp_path / "out")
    examples = read_examples(data, task, DEFAULT_COLUMNS[task])
    scores = task_scores(task, examples, tuned.predict(examples))
    assert scores[result.metric] == pytest.approx(result.best[result.metric], abs=1e-6)
    info = json.loads((tmp_path / "out" / "model" / "task.json").read_text())
    assert info["task"] == task and info["scores"] == result.best
    assert (tmp_path / "out" / "loss.png").is_file() and (tmp_path / "out" / "eval.png").is_file()


def test_predictions_need_no_targets_and_have_the_task_shape(encoder_dir, tmp_path):
    run(encoder_dir, tmp_path, "tag")
    tuned = load_finetuned(tmp_path / "out" / "model")
    tags = tuned.predict([Example(["bob", "lives", "in", "rome"], None, None)])
    assert len(tags) == 1 and len(tags[0]) == 4 and set(tags[0]) <= set(tuned.labels)


def test_classifier_learns_the_tiny_set(encoder_dir, tmp_path):
    result, _ = run(encoder_dir, tmp_path, "classify",
                    EncoderFinetuneConfig(epochs=15, loop=LoopConfig(max_steps=None, batch_size=4), optim=lr(3e-3),
                                          max_length=32, patience=15))
    assert result.before["accuracy"] <= 0.75 and result.best["accuracy"] >= 0.9


def test_early_stopping_after_patience_epochs_without_improvement(encoder_dir, tmp_path):
    frozen = EncoderFinetuneConfig(epochs=6, loop=LoopConfig(max_steps=None, batch_size=4), optim=lr(1e-12),
                                   max_length=32, patience=2)
    result, _ = run(encoder_dir, tmp_path, "classify", frozen)
    assert result.stopped_early and result.finished
    assert result.best_epoch == 1 and result.step == 3 * 3  # epoch 1 best, epochs 2 and 3 no better


def test_the_best_epoch_is_kept_and_patience_counts_epochs_in_a_row_without_improvement():
    state = {"best": None, "best_epoch": 0, "best_scores": {}, "bad_epochs": 0, "stopped_early": False}
    saved, stopped_after = [], None
    for epoch, score in enumerate([0.5, 0.8, 0.7, 0.9, 0.9, 0.6, 0.95], start=1):
        keep_best({"accuracy": score}, "accuracy", epoch, state, 2, lambda epoch=epoch: saved.append(epoch))
        if state["stopped_early"]:
            stopped_after = epoch
            break
    assert saved == [1, 2, 4]  # 0.7 after 0.8 is one bad epoch, then 0.9 resets the count; a tie is no better
    assert stopped_after == 6 and state["best_epoch"] == 4 and state["best_scores"] == {"accuracy": 0.9}


def test_stopped_and_resumed_run_ends_with_the_same_weights(encoder_dir, tmp_path):
    cfg = EncoderFinetuneConfig(epochs=2, loop=LoopConfig(max_steps=None, batch_size=4), optim=lr(1e-3), max_length=32,
                                dropout=0.3, patience=5)
    run(encoder_dir, tmp_path, "classify", cfg, out=tmp_path / "whole")
    first, _ = run(encoder_dir, tmp_path, "classify", cfg, out=tmp_path / "split", stop_after=4)
    assert not first.finished and first.step == 4  # mid-epoch 2
    again, _ = run(encoder_dir, tmp_path, "classify", cfg, out=tmp_path / "split", resume=True)
    assert again.finished and again.step == 6
    whole = load_checkpoint(list_checkpoints(tmp_path / "whole" / "checkpoints")[-1])["trainable"]
    split = load_checkpoint(list_checkpoints(tmp_path / "split" / "checkpoints")[-1])["trainable"]
    assert all(torch.equal(whole[k], split[k]) for k in whole)
    lines = [json.loads(line)["step"] for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert lines == sorted(set(lines))  # each step logged once across the two sessions


def test_a_short_last_batch_is_filled_up_to_equal_parts_with_the_epochs_first_examples():
    whole = [step_examples(11, 4, step, seed=0) for step in range(3)]
    assert [len(batch) for batch in whole] == [4, 4, 3] and sorted(np.concatenate(whole)) == list(range(11))
    halves = [step_examples(11, 4, step, seed=0, parts=2) for step in range(3)]
    assert all(np.array_equal(h, w) for h, w in zip(halves[:2], whole[:2]))
    assert halves[2].tolist() == [*whole[2], whole[0][0]]  # 3 examples and the epoch's first: two parts of 2
    assert not np.array_equal(step_examples(11, 4, 3, seed=0), whole[0])  # the next epoch is shuffled anew


def test_two_micro_batches_give_the_losses_of_one_batch(encoder_dir, tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", task_rows("classify")[:11])  # batches of 4, 4 and 3 each epoch
    losses = {}
    for accum in (1, 2):
        cfg = dataclasses.replace(FAST, dropout=0.0, loop=FAST.loop.replace(grad_accum=accum))
        result = finetune_encoder(str(encoder_dir), "classify", str(data), tmp_path / f"accum{accum}", str(data),
                                  cfg, show_progress=False)
        assert result.finished and result.step == 2 * 3
        rows = [json.loads(line) for line in (tmp_path / f"accum{accum}" / "metrics.jsonl").read_text().splitlines()]
        losses[accum] = [row["loss"] for row in rows if "loss" in row]
    assert losses[2][:2] == pytest.approx(losses[1][:2], rel=1e-5)  # the third batch differs: filled up to 4


def test_resume_with_other_settings_is_refused(encoder_dir, tmp_path):
    run(encoder_dir, tmp_path, "classify", FAST, stop_after=2)
    with pytest.raises(LmlabError, match="lr"):
        run(encoder_dir, tmp_path, "classify", dataclasses.replace(FAST, optim=lr(5e-4)), resume=True)


def test_long_inputs_are_cut_with_a_warning_or_refused(encoder_dir, tmp_path):
    cfg = EncoderFinetuneConfig(epochs=1, loop=LoopConfig(max_steps=None, batch_size=4), max_length=6)
    with pytest.warns(TruncationWarning, match="longer than --max-length 6"):
        run(encoder_dir, tmp_path, "classify", cfg)
    with pytest.raises(LmlabError, match=r"classify.jsonl:\d+ is longer than --max-length 6"):
        run(encoder_dir, tmp_path, "classify", EncoderFinetuneConfig(max_length=6, truncate=False),
            out=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_qa_answers_cut_off_by_truncation_are_not_trained_on(encoder_dir, tmp_path):
    cfg = EncoderFinetuneConfig(epochs=1, loop=LoopConfig(max_steps=None, batch_size=4), max_length=12)
    with pytest.warns(TruncationWarning):
        result, _ = run(encoder_dir, tmp_path, "qa", cfg)
    assert result.finished and result.step < 3  # the "italy" answers lie past 12 tokens


def test_sentiment_task_defeats_a_bag_of_words():
    train, evaluation = sentiment_splits(400, 100, seed=0)
    assert not {t for t, _ in train} & {t for t, _ in evaluation}
    labels_of_bag = {}
    for text, label in train:
        labels_of_bag.setdefault(tuple(sorted(text.split())), set()).add(label)
    assert any(len(labels) == 2 for labels in labels_of_bag.values())  # same words, opposite labels
    assert sum(label == "positive" for _, label in train) == 200


@pytest.mark.slow
def test_bert_tiny_from_scratch_learns_embedded_sentiment_far_above_chance(tmp_path):
    cfg = EncoderFinetuneConfig(epochs=6, optim=lr(5e-4), patience=6)
    result = finetune_encoder("bert-tiny", "classify", "sentiment", tmp_path / "out", cfg=cfg, show_progress=False)
    assert result.before["accuracy"] <= 0.6 and result.best["accuracy"] >= 0.9
