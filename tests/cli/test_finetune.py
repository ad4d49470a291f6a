"""`lmlab finetune` on the command line: a run end to end, and each bad input as one line, exit code 2,
nothing written."""

import json
from types import NoneType

import pytest

from conftest import lmlab, one_line_error
from encoder_data import task_rows, tiny_encoder_dir, write_csv, write_jsonl
from lmlab.cli.commands import build_parser, parse
from lmlab.data.encoder_tasks import DEFAULT_COLUMNS, TASKS, read_examples
from lmlab.models.encoder_task_files import load_finetuned
from lmlab.models.finetuned_encoder import TASK_HEADS
from lmlab.modules.pooling import ContextPooler
from lmlab.recipes.finetune_encoder import TASK_SPECS, task_scores
from lmlab.tokenizers.wordpiece import train_wordpiece

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = ["--epochs", "1", "--batch-size", "4", "--max-length", "32"]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    return tiny_encoder_dir(tmp_path_factory.mktemp("enc") / "tiny")


@pytest.fixture
def train_csv(tmp_path):
    return write_csv(tmp_path / "train.csv", ["text,label", "the movie was good,pos", "the food was awful,neg",
                                              "\"paris, rome\",pos", "the cat was bad,neg"])


def finetune(encoder_dir, train, out, *extra):
    return lmlab("finetune", "--model", encoder_dir, "--task", "classify", "--data", train, "--out", out,
                 *FAST, *extra)


def test_finetune_on_a_csv_prints_scores_and_saves_the_model(encoder_dir, train_csv, tmp_path, capsys):
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--eval", train_csv) == 0
    printed = capsys.readouterr().out
    assert "eval accuracy:" in printed and "early-stopping metric" in printed
    assert (tmp_path / "out" / "model" / "head.safetensors").is_file()


def test_max_steps_cuts_a_run_short_for_a_smoke_test(encoder_dir, tmp_path, capsys):
    """Two steps of the embedded task's epochs (of 32-example batches), then the evaluation and the saved model."""
    assert lmlab("finetune", "--model", encoder_dir, "--task", "classify", "--data", "sentiment", "--out",
                 tmp_path / "out", "--max-steps", "2", "--batch-size", "4", "--max-length", "16") == 0
    assert "done: 2 steps" in capsys.readouterr().out
    assert (tmp_path / "out" / "model" / "head.safetensors").is_file()


def test_renamed_columns_are_read(encoder_dir, tmp_path):
    rows = [{"review": r["text"], "stars": r["label"]} for r in task_rows("classify")]
    data = write_jsonl(tmp_path / "t.jsonl", rows)
    assert finetune(encoder_dir, data, tmp_path / "out", "--text-column", "review", "--label-column", "stars") == 0


def test_unknown_eval_label_is_named_with_the_training_labels(encoder_dir, train_csv, tmp_path, capsys):
    bad_eval = write_csv(tmp_path / "eval.csv", ["text,label", "the movie was good,pos", "so so,neutral"])
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--eval", bad_eval) == 2
    one_line_error(capsys, "eval.csv:3", "'neutral'", "labels seen in training: neg, pos")
    assert not (tmp_path / "out").exists()


def test_missing_label_column_names_the_columns_present(encoder_dir, tmp_path, capsys):
    data = write_csv(tmp_path / "t.csv", ["text,sentiment", "the movie was good,pos"])
    assert finetune(encoder_dir, data, tmp_path / "out") == 2
    one_line_error(capsys, "no column 'label'", "columns: text, sentiment", "--label-column")
    assert not (tmp_path / "out").exists()


def test_tokenizer_larger_than_the_model_vocabulary_is_refused(encoder_dir, train_csv, tmp_path, capsys):
    big = train_wordpiece([" ".join(f"word{i} w{i}x" for i in range(400))], 600)
    big.save(str(tmp_path / "big.json"))
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--tokenizer", tmp_path / "big.json") == 2
    one_line_error(capsys, f"the tokenizer has {big.get_vocab_size()} tokens", "the model's vocabulary has")
    assert not (tmp_path / "out").exists()


def test_long_inputs_are_cut_with_a_warning_by_default(encoder_dir, train_csv, tmp_path, capsys):
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--max-length", "5") == 0
    assert "lmlab: warning:" in capsys.readouterr().err


def test_long_inputs_are_an_error_with_no_truncate(encoder_dir, train_csv, tmp_path, capsys):
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--max-length", "5", "--no-truncate") == 2
    one_line_error(capsys, "train.csv:", "longer than --max-length 5")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, lines, where", [
    ("bad.csv", ["text,label", "fine,pos", "too,many,fields", "ok,neg"], "bad.csv:3 has 3 fields"),
    ("bad.csv", ["text,label", "fine,pos", "\"unclosed,neg", "ok,neg"], "bad.csv:3 is not valid CSV"),
    ("bad.jsonl", ['{"text": "fine", "label": "pos"}', '{"text": "broken", ', '{"text": "x", "label": "neg"}'],
     "bad.jsonl:2 is not valid JSON"),
    ("bad.jsonl", ['{"text": "fine", "label": "pos"}', '["a", "list"]'], "bad.jsonl:2 is a JSON list"),
])
def test_malformed_line_is_named(encoder_dir, tmp_path, capsys, name, lines, where):
    data = write_csv(tmp_path / name, lines)
    assert finetune(encoder_dir, data, tmp_path / "out") == 2
    one_line_error(capsys, where)
    assert not (tmp_path / "out").exists()


def test_embedded_task_of_another_kind_is_refused(encoder_dir, tmp_path, capsys):
    assert lmlab("finetune", "--model", encoder_dir, "--task", "tag", "--data", "sentiment",
                 "--out", tmp_path / "out") == 2
    one_line_error(capsys, "'sentiment' is a 'classify' task", "--task classify")


def test_resume_continues_a_stopped_run(encoder_dir, train_csv, tmp_path, capsys):
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--epochs", "3", "--stop-after", "1") == 0
    assert "--resume" in capsys.readouterr().out
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--epochs", "3") == 2  # not over an old run
    one_line_error(capsys, "already holds a run")
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--epochs", "3", "--resume") == 0
    assert "best epoch" in capsys.readouterr().out


def test_a_batch_that_micro_batches_do_not_divide_is_refused(encoder_dir, train_csv, tmp_path, capsys):
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--grad-accum", "3") == 2
    one_line_error(capsys, "--batch-size 4 is not divisible by --grad-accum 3")  # LoopConfig's check, before any work
    assert not (tmp_path / "out").exists()


def test_warmup_steps_replace_the_default_warmup_share(encoder_dir, train_csv, tmp_path, capsys):
    assert finetune(encoder_dir, train_csv, tmp_path / "out", "--warmup-steps", "1", "--lr", "0.01") == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert rows[1]["lr"] == pytest.approx(0.01)  # 1 step of warmup; 10% of the 1 step: none, and lr 0 after it
    capsys.readouterr()
    assert finetune(encoder_dir, train_csv, tmp_path / "o2", "--warmup-steps", "1", "--warmup-ratio", "0.5") == 2
    one_line_error(capsys, "--warmup-steps and --warmup-ratio")
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize("task", TASKS)
def test_deberta_tiny_finetunes_with_every_head_and_loads_back(tmp_path, capsys, task):
    """From the preset (a WordPiece trained on the data): the head of each task on a DeBERTa, whose [CLS]
    pooler is its own GELU one; the saved model predicts what the run reported."""
    data = write_jsonl(tmp_path / f"{task}.jsonl", task_rows(task))
    assert lmlab("finetune", "--model", "deberta-tiny", "--task", task, "--data", data, "--eval", data,
                 "--out", tmp_path / "out", "--max-steps", "2", "--batch-size", "4", "--max-length", "32") == 0
    assert "done: 2 steps" in capsys.readouterr().out
    tuned = load_finetuned(tmp_path / "out")
    assert tuned.model.encoder.config.family == "deberta"
    assert isinstance(tuned.model.encoder.pooler, ContextPooler if TASK_HEADS[task].reads == "pooled" else NoneType)
    examples = read_examples(data, task, DEFAULT_COLUMNS[task])
    metric = TASK_SPECS[task].metric
    reported = json.loads((tmp_path / "out" / "model" / "task.json").read_text())["scores"][metric]
    assert task_scores(task, examples, tuned.predict(examples))[metric] == pytest.approx(reported, abs=1e-6)


def test_the_old_task_name_seq2seq_still_parses_as_text_to_text_after_a_warning(capsys):
    old = "seq2seq"
    args = parse(build_parser(), ["finetune", "--model", "t5-tiny", "--task", old, "--data", "numbers",
                                  "--out", "somewhere"])
    assert args.task == "text-to-text"
    assert capsys.readouterr().err == f"lmlab: warning: --task {old} is deprecated; use --task text-to-text\n"
    assert old not in build_parser()._subparsers._group_actions[0].choices["finetune"].format_help()
