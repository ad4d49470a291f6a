"""`lmlab finetune --task text-to-text`: an encoder-decoder trains on source/target pairs, writes a model
that loads back, resumes to the same weights bit for bit; bad input is one line, exit 2, nothing written."""

import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import lmlab, one_line_error
from lmlab.config import LoopConfig
from lmlab.models.encoder_decoder.files import load_encoder_decoder
from lmlab.recipes.finetune_encoder_decoder import EncoderDecoderFinetuneConfig, finetune_encoder_decoder
from lmlab.training.checkpoint import list_checkpoints

pytestmark = pytest.mark.usefixtures("one_thread")

TINY_ARGS = ["--max-steps", "4", "--batch-size", "8", "--train-size", "40", "--val-size", "6", "--test-size", "6",
             "--eval-every", "2", "--checkpoint-every", "2", "--vocab-size", "300", "--max-new-tokens", "6",
             "--log-every", "1"]
TINY = EncoderDecoderFinetuneConfig(loop=LoopConfig(max_steps=4, batch_size=8, eval_every=2, checkpoint_every=2,
                                                    keep_checkpoints=2, log_every=1),
                                    train_size=40, val_size=6, test_size=6, vocab_size=300, max_new_tokens=6,
                                    optim=EncoderDecoderFinetuneConfig.optim.replace(warmup_steps=1))


def rows(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


@pytest.mark.parametrize("preset", ["t5-tiny", "bart-tiny"])
def test_finetune_writes_a_model_that_loads_back_with_metrics_and_test_accuracy(tmp_path, preset):
    run = tmp_path / "run"
    assert lmlab("finetune", "--task", "text-to-text", "--model", preset, "--data", "numbers", "--out", run,
                 *TINY_ARGS) == 0
    metrics = rows(run)
    assert [r["step"] for r in metrics if "val_seq_acc" in r] == [0, 2, 4]
    assert metrics[-1].keys() == {"step", "test_seq_acc", "test_n"} and metrics[-1]["test_n"] == 6
    assert (run / "accuracy.png").read_bytes().startswith(b"\x89PNG")
    model, tokenizer = load_encoder_decoder(run / "model")
    assert model.config.family == preset.split("-")[0] and model.config.vocab_size == tokenizer.get_vocab_size()
    assert [p.name for p in list_checkpoints(run / "checkpoints")] == ["step_0000002.pt", "step_0000004.pt"]


def test_a_pair_file_is_split_into_training_and_validation_pairs(tmp_path, capsys):
    pairs = write_jsonl(tmp_path / "pairs.jsonl",
                        [{"source": f"{i} plus one", "target": str(i + 1)} for i in range(30)])
    assert lmlab("finetune", "--task", "text-to-text", "--model", "transformer-tiny", "--data", pairs,
                 "--out", tmp_path / "run", "--max-steps", "2", "--batch-size", "4", "--eval-every", "2",
                 "--vocab-size", "300", "--max-new-tokens", "4") == 0
    assert "test sequence accuracy" not in capsys.readouterr().out
    assert "val_seq_acc" in rows(tmp_path / "run")[-1]


@pytest.mark.slow
def test_bart_tiny_learns_to_write_numbers_as_digits(tmp_path):
    loop = LoopConfig(max_steps=600, batch_size=32, eval_every=600, checkpoint_every=600, keep_checkpoints=2)
    cfg = EncoderDecoderFinetuneConfig(loop=loop, train_size=4000, val_size=100, test_size=200, vocab_size=500,
                                       max_new_tokens=8)
    result = finetune_encoder_decoder("bart-tiny", "numbers", tmp_path, cfg=cfg, show_progress=False)
    assert result.test["test_seq_acc"] >= 0.5


def test_resume_gives_bit_identical_weights(tmp_path):
    finetune_encoder_decoder("t5-tiny", "numbers", tmp_path / "full", cfg=TINY, show_progress=False)
    first = finetune_encoder_decoder("t5-tiny", "numbers", tmp_path / "split", cfg=TINY, stop_after=3,
                                     show_progress=False)
    assert not first.finished and first.step == 3 and first.model_dir is None
    second = finetune_encoder_decoder("t5-tiny", "numbers", tmp_path / "split", cfg=TINY, resume=True,
                                      show_progress=False)
    assert second.finished and second.step == 4
    full, split = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("full", "split"))
    assert full.keys() == split.keys() and all(torch.equal(full[k], split[k]) for k in full)
    assert second.test["test_seq_acc"] == rows(tmp_path / "full")[-1]["test_seq_acc"]


def test_a_source_longer_than_the_encoder_reads_is_refused_or_cut_when_asked(tmp_path, capsys):
    long = " ".join(["seven"] * 300)  # > bart-tiny's 256 source tokens
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"source": long, "target": "7"}] + [
        {"source": "one", "target": "1"}, {"source": "two", "target": "2"}])
    args = ["finetune", "--task", "text-to-text", "--model", "bart-tiny", "--data", pairs, "--vocab-size", "268",
            "--max-steps", "1", "--batch-size", "2", "--max-new-tokens", "2"]
    assert lmlab(*args, "--out", tmp_path / "refused") == 2
    one_line_error(capsys, "pair 1 of", "256", "--truncate")
    assert not (tmp_path / "refused").exists()
    assert lmlab(*args, "--out", tmp_path / "cut", "--truncate") == 0
    assert "were cut" in capsys.readouterr().err


@pytest.mark.parametrize("model, kind", [("gpt2-tiny", "decoder-only"), ("bert-tiny", "encoder-only"),
                                         ("directory", "gpt2 model")])
def test_a_model_without_encoder_and_decoder_is_refused(tmp_path, capsys, model, kind):
    if model == "directory":
        model = tmp_path / "gpt2"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert lmlab("finetune", "--task", "text-to-text", "--model", model, "--data", "numbers", "--out",
                 tmp_path / "run") == 2
    one_line_error(capsys, kind, "encoder-decoder")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("content, suffix, fragments", [
    ('{"source": "one", "target": "1"}\n{"source": "two"}\n', ".jsonl", [":2 has no 'target' field"]),
    ("", ".jsonl", ["holds no examples"]),
    ('{"source": "one", "target": "1"}\n{"source": "two", \n', ".jsonl", [":2 is not valid JSON"]),
    ("source,target\none,1\n", ".csv", ["holds 1 pair", "--eval"]),
    ("source,answer\none,1\ntwo,2\n", ".csv", [":2 has no 'target' field"]),
    ('{"source": "one", "target": ""}\n', ".jsonl", [":1: 'target' is ''"]),
])
def test_a_malformed_pair_file_is_one_line_naming_the_line(tmp_path, capsys, content, suffix, fragments):
    path = tmp_path / f"pairs{suffix}"
    path.write_text(content)
    assert lmlab("finetune", "--task", "text-to-text", "--model", "t5-tiny", "--data", path, "--out",
                 tmp_path / "run") == 2
    one_line_error(capsys, *fragments)
    assert not (tmp_path / "run").exists()


def test_flags_of_the_other_kind_of_task_are_refused(tmp_path, capsys):
    assert lmlab("finetune", "--task", "text-to-text", "--model", "t5-tiny", "--data", "numbers", "--out",
                 tmp_path / "a", "--epochs", "3", "--text-column", "x") == 2
    one_line_error(capsys, "--epochs, --text-column do not apply to --task text-to-text")
    assert lmlab("finetune", "--task", "classify", "--model", "bert-tiny", "--data", "sentiment", "--out",
                 tmp_path / "b", "--train-size", "3") == 2
    one_line_error(capsys, "--train-size does not apply to --task classify")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
