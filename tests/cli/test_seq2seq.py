"""`lmlab seq2seq train / translate / eval`: the happy path and one-line errors that write nothing."""

import json

import numpy as np
import pytest

from conftest import lmlab, one_line_error
from lmlab.figures import heatmap_image
from lmlab.generation.config import GenerationConfig
from lmlab.generation.seq2seq import attention_map, translate_ids
from lmlab.models.seq2seq.files import load_seq2seq_dir
from png_files import read_png

pytestmark = pytest.mark.usefixtures("one_thread")

TINY_ARGS = ["--task", "reverse", "--train-size", "300", "--val-size", "20", "--test-size", "30", "--hidden", "16",
             "--embed-dim", "8", "--attention-dim", "8", "--max-steps", "8", "--batch-size", "16", "--eval-every", "4",
             "--checkpoint-every", "4", "--log-every", "2"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("s2s") / "run"
    assert lmlab("seq2seq", "train", *TINY_ARGS, "--out", out) == 0
    return out


def test_train_reports_accuracy_and_saves_the_model(run_dir):
    assert (run_dir / "model" / "config.json").is_file()
    assert json.loads((run_dir / "run.json").read_text())["task"] == "reverse"


def test_stop_and_resume_on_the_command_line(tmp_path, capsys):
    assert lmlab("seq2seq", "train", *TINY_ARGS, "--out", tmp_path, "--stop-after", "4") == 0
    assert "stopped at step 4" in capsys.readouterr().out
    assert lmlab("seq2seq", "train", *TINY_ARGS, "--out", tmp_path, "--resume") == 0
    assert "done: 8 steps" in capsys.readouterr().out


def test_translate_prints_the_output_and_saves_its_attention_map(run_dir, tmp_path, capsys):
    capsys.readouterr()
    assert lmlab("seq2seq", "translate", "--model", run_dir, "--text", "1234", "--beams", "3",
                 "--heatmap", tmp_path / "map.png") == 0
    output, saved = capsys.readouterr().out.split("\n")[:2]
    assert "map.png" in saved
    trained = load_seq2seq_dir(run_dir)
    source = trained.src_vocab.encode("1234")
    expected = translate_ids(trained.model, [source], GenerationConfig(max_new_tokens=trained.max_len, num_beams=3))[0]
    assert output == trained.tgt_vocab.decode(expected.token_ids)
    produced = expected.sampled_ids
    weights = attention_map(trained.model, source, produced)
    image = heatmap_image(weights.numpy(), [trained.tgt_vocab.token(i) for i in produced],
                          ["1", "2", "3", "4", "</s>"], title="additive attention", value_range=(0.0, 1.0))
    assert np.array_equal(read_png(tmp_path / "map.png"), image)


@pytest.mark.parametrize("beams", ["1", "2"])
def test_eval_scores_the_test_split(run_dir, capsys, beams):
    capsys.readouterr()
    assert lmlab("seq2seq", "eval", "--model", run_dir / "model", "--beams", beams, "--json") == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["n"] == 30 and 0 <= scores["seq_acc"] <= scores["char_acc"] <= 1
    assert (scores["task"], scores["attention"], scores["beams"]) == ("reverse", "additive", int(beams))
    assert lmlab("seq2seq", "eval", "--model", run_dir) == 0
    assert "reverse test split (30 pairs, greedy): sequence accuracy" in capsys.readouterr().out


@pytest.mark.parametrize("text,fragments", [("12a4", ["never saw", "'a'"]), ("", ["empty"])])
def test_bad_text_is_one_line_and_writes_nothing(run_dir, tmp_path, capsys, text, fragments):
    assert lmlab("seq2seq", "translate", "--model", run_dir, "--text", text, "--heatmap", tmp_path / "m.png") == 2
    one_line_error(capsys, *fragments)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["translate", "eval"])
def test_fewer_than_one_beam_is_refused(run_dir, capsys, command):
    text = ["--text", "12"] if command == "translate" else []
    assert lmlab("seq2seq", command, "--model", run_dir, *text, "--beams", "0") == 2
    one_line_error(capsys, "--beams 0")


def test_unknown_task_is_refused_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        lmlab("seq2seq", "train", "--task", "sorting", "--out", tmp_path / "run")
    assert exit_.value.code == 2
    one_line_error(capsys, "invalid choice: 'sorting'", "dates")
    assert not (tmp_path / "run").exists()


def test_missing_model_and_heatmap_without_attention_are_refused(tmp_path, capsys):
    assert lmlab("seq2seq", "eval", "--model", tmp_path) == 2
    one_line_error(capsys, "no trained seq2seq model")
    assert lmlab("seq2seq", "train", *TINY_ARGS, "--attention", "none", "--max-steps", "2", "--out", tmp_path / "r") == 0
    capsys.readouterr()
    assert lmlab("seq2seq", "translate", "--model", tmp_path / "r", "--text", "12", "--heatmap", tmp_path / "m.png") == 2
    one_line_error(capsys, "--attention none", "drop --heatmap")
    assert not (tmp_path / "m.png").exists()


def test_generate_on_a_seq2seq_model_points_to_seq2seq_translate(run_dir, capsys):
    assert lmlab("generate", "--model", run_dir, "--prompt", "123") == 2
    assert "lmlab seq2seq translate" in one_line_error(capsys)
