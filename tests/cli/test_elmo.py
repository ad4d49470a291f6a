"""`lmlab elmo ...` end to end, and its bad inputs: one line, exit code 2."""

import json

import pytest

from conftest import lmlab, one_line_error
from lmlab.data.analogies import analogy_corpus

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")]
TINY = ["--d-model", "16", "--lstm-cells", "24", "--char-dim", "8", "--max-chars", "12", "--max-steps", "6",
        "--batch-size", "4", "--block-size", "10", "--eval-every", "3", "--eval-batches", "1",
        "--checkpoint-every", "3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    data = tmp_path_factory.mktemp("elmo") / "corpus.txt"
    data.write_text("\n\n".join(analogy_corpus(200, seed=7)))
    return data


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, corpus):
    out = tmp_path_factory.mktemp("elmo") / "run"
    assert lmlab("elmo", "train", "--data", corpus, "--out", out, *TINY) == 0
    return out


def test_train_saves_the_model_metrics_and_loss_curve(run_dir):
    assert {p.name for p in (run_dir / "model").iterdir()} == {"model.safetensors", "config.json", "vocab.txt",
                                                              ".lmlab"}
    assert (run_dir / "metrics.jsonl").exists() and (run_dir / "loss.png").exists()


def test_embed_prints_one_vector_per_word(run_dir, capsys):
    capsys.readouterr()
    assert lmlab("elmo", "embed", "--model", run_dir / "model", "--text", "Paris is big. The cat sleeps!",
                 "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tokens"] == ["paris", "is", "big", "the", "cat", "sleeps"]
    assert len(result["vectors"]) == 6 and all(len(v) == 32 for v in result["vectors"])
    assert lmlab("elmo", "embed", "--model", run_dir / "model", "--text", "a cat", "--layer", "0") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["a", "cat"] and len(lines[0].split()) == 33


def test_embed_with_a_missing_layer_says_which_exist(run_dir, capsys):
    capsys.readouterr()
    assert lmlab("elmo", "embed", "--model", run_dir / "model", "--text", "a cat", "--layer", "7") == 2
    one_line_error(capsys, "--layer 7", "0..2")


def test_embed_of_a_directory_without_a_model_is_an_error(tmp_path, capsys):
    assert lmlab("elmo", "embed", "--model", tmp_path, "--text", "a cat") == 2
    one_line_error(capsys, "not an ELMo model directory")


def test_bad_shape_is_refused_before_reading_data(tmp_path, capsys):
    assert lmlab("elmo", "train", "--data", "analogies", "--out", tmp_path / "r", "--d-model", "32",
                 "--lstm-cells", "16") == 2
    one_line_error(capsys, "lstm_cells")
    assert not (tmp_path / "r").exists()


def test_resume_with_another_learning_rate_names_it(run_dir, corpus, capsys):
    capsys.readouterr()
    assert lmlab("elmo", "train", "--data", corpus, "--out", run_dir, *TINY, "--lr", "0.5", "--resume") == 2
    one_line_error(capsys, "optim.lr")


def test_grad_accum_that_does_not_divide_the_batch_is_refused_before_work(tmp_path, capsys):
    assert lmlab("elmo", "train", "--data", "analogies", "--out", tmp_path / "r", "--batch-size", "4",
                 "--grad-accum", "3") == 2
    one_line_error(capsys, "--grad-accum 3")
    assert not (tmp_path / "r").exists()
