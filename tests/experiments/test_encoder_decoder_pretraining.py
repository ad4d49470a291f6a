"""The `encoder-decoder-pretraining` experiment: T5 and BART pre-trained with their own objective vs from
scratch. The default run is a smoke test with a few steps; the full one (slow) checks that
pre-training helps."""

import json
import re
from pathlib import Path

import pytest

from conftest import lmlab, one_line_error
from lmlab.data.pair_tasks import make_task
from lmlab.experiments.encoder_decoder_pretraining import (
    PretrainingExperimentSettings,
    encoder_decoder_pretraining,
    task_sizes,
    write_number_corpus,
)

pytestmark = pytest.mark.usefixtures("one_thread")

SMOKE = ["--pretrain-steps", "2", "--finetune-steps", "2", "--train-pairs", "8", "--val-pairs", "4", "--test-pairs",
         "4", "--eval-every", "1", "--vocab-size", "420", "--block-size", "16"]


def test_smoke_run_writes_table_json_and_plot_for_both_starts_of_each_preset(tmp_path, capsys, corpus_file):
    out = tmp_path / "exp"
    assert lmlab("experiment", "encoder-decoder-pretraining", "--out", out, "--data", corpus_file, *SMOKE) == 0
    printed = capsys.readouterr().out
    assert "| t5-tiny | span_corruption (50% in spans of 8)" in printed and "| bart-tiny | denoising" in printed
    report = json.loads((out / "encoder_decoder_pretraining.json").read_text())
    for preset in ("t5-tiny", "bart-tiny"):
        for start in ("pre-trained", "from scratch"):
            result = report["results"][preset][start]
            assert 0 <= result["test_seq_acc"] <= 1 and [step for step, _ in result["val_curve"]] == [0, 1, 2]
            assert result["mean_val_seq_acc"] == sum(acc for _, acc in result["val_curve"]) / 3
    assert (out / "encoder_decoder_pretraining.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "encoder_decoder_pretraining.md").read_text() in printed
    scratch = json.loads((out / "runs" / "t5-tiny-scratch" / "run.json").read_text())
    assert scratch["base_model"] == "t5-tiny"  # fresh weights, the pre-trained run's tokenizer
    assert (out / "runs" / "t5-tiny-scratch" / "tokenizer.json").read_text() == \
        (out / "runs" / "t5-tiny-pretrain" / "tokenizer.json").read_text()


def test_an_existing_experiment_or_an_unknown_preset_is_refused(tmp_path, capsys, corpus_file):
    (tmp_path / "runs").mkdir()
    assert lmlab("experiment", "encoder-decoder-pretraining", "--out", tmp_path, *SMOKE) == 2
    one_line_error(capsys, "already holds an experiment")
    assert lmlab("experiment", "encoder-decoder-pretraining", "--out", tmp_path / "new", "--presets", "gpt2-tiny") == 2
    one_line_error(capsys, "gpt2-tiny", "not encoder-decoder presets")


@pytest.mark.slow
def test_span_corruption_pretrained_t5_beats_t5_from_scratch(tmp_path):
    report = encoder_decoder_pretraining(tmp_path, PretrainingExperimentSettings(presets=("t5-tiny",)),
                                         show_progress=False)
    result = report["results"]["t5-tiny"]
    assert result["pre-trained"]["mean_val_seq_acc"] > result["from scratch"]["mean_val_seq_acc"] + 0.05
    assert result["pre-trained"]["test_seq_acc"] > result["from scratch"]["test_seq_acc"]


@pytest.mark.slow
def test_denoising_pretrained_bart_learns_the_task_faster_than_from_scratch(tmp_path):
    report = encoder_decoder_pretraining(tmp_path, PretrainingExperimentSettings(presets=("bart-tiny",)),
                                         show_progress=False)
    result = report["results"]["bart-tiny"]
    assert result["pre-trained"]["mean_val_seq_acc"] > result["from scratch"]["mean_val_seq_acc"] + 0.1
    assert result["pre-trained"]["test_seq_acc"] >= 0.9


def test_the_generated_corpus_never_mentions_a_validation_or_test_number(tmp_path):
    s = PretrainingExperimentSettings(corpus_documents=400, train_pairs=50, val_pairs=100, test_pairs=200)
    text = " ".join(json.loads(line)["text"] for line in
                    Path(write_number_corpus(tmp_path / "corpus.jsonl", s)).read_text().splitlines())
    splits = make_task(s.task, s.seed, task_sizes(s))
    held_out = {target for _, target in splits.validation + splits.test}
    assert held_out and not held_out & set(re.findall(r"\d+", text))
    assert "cheque for" in text or "in figures" in text or "aloud as" in text or "spelled it out" in text
