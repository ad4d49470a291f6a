"""`lmlab train --arch window|rnn|lstm|gru`, then `lmlab eval perplexity` and `lmlab generate` on
the result; flags an architecture does not use, and bad data, are one error line and write nothing."""

import json

import pytest

from conftest import lmlab, one_line_error

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--vocab-size", "300", "--d-model", "8", "--hidden", "16", "--max-steps", "4", "--batch-size", "4",
        "--block-size", "8", "--eval-every", "2", "--checkpoint-every", "2", "--warmup-steps", "1",
        "--lr", "0.01", "--context-length", "64"]
ARCH_ARGS = {"window": ["--window", "3"], "rnn": ["--n-layers", "2"], "lstm": ["--dropout", "0.1"],
             "gru": ["--n-layers", "1"]}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus_file):
    """One tiny model per architecture, trained through the CLI."""
    runs = {}
    for arch, extra in ARCH_ARGS.items():
        out = tmp_path_factory.mktemp(arch) / "run"
        assert lmlab("train", "--arch", arch, "--data", corpus_file, "--out", out, *TINY, *extra) == 0
        runs[arch] = out
    return runs


@pytest.mark.parametrize("arch", list(ARCH_ARGS))
def test_trained_model_has_a_perplexity_and_generates(trained, corpus_file, tmp_path, capsys, arch):
    run, text = trained[arch], tmp_path / "text.txt"
    text.write_text(corpus_file.read_text()[:3000])
    config = json.loads((run / "model" / "config.json").read_text())
    assert config["model_type"] == ("window" if arch == "window" else "rnn")
    assert config.get("cell", "window") == arch
    capsys.readouterr()
    assert lmlab("eval", "perplexity", "--model", run, "--data", text, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert 1 < result["perplexity"] < config["vocab_size"] and result["tokens"] > 100  # better than uniform
    assert lmlab("generate", "--model", run / "model", "--prompt", "Zini", "--max-new-tokens", "5", "--seed", "1",
                 "--json") == 0
    generated = json.loads(capsys.readouterr().out)
    assert 1 <= len(generated["token_ids"]) <= 5


def test_cli_resume_finishes_the_run(tmp_path, corpus_file, capsys):
    out = tmp_path / "run"
    assert lmlab("train", "--arch", "gru", "--data", corpus_file, "--out", out, *TINY, "--stop-after", "2") == 0
    assert "stopped at step 2" in capsys.readouterr().out
    assert lmlab("train", "--arch", "gru", "--data", corpus_file, "--out", out, *TINY, "--resume") == 0
    assert "done: 4 steps" in capsys.readouterr().out


@pytest.mark.parametrize("arch,flags,named", [
    ("lstm", ["--n-heads", "2"], "--n-heads does not apply to --arch lstm"),
    ("rnn", ["--window", "3", "--d-ff", "8"], "--d-ff, --window do not apply to --arch rnn"),
    ("window", ["--n-layers", "2"], "--n-layers does not apply to --arch window"),
    ("gru", ["--model", "gpt2-tiny"], "--model does not apply"),
    ("gru", ["--grad-accum", "2"], "--grad-accum does not apply"),
    ("transformer", ["--model", "gpt2-tiny", "--window", "3"], "--window does not apply to --arch transformer"),
    ("transformer", ["--model", "gpt2-tiny", "--hidden", "3"], "--hidden does not apply to --arch transformer"),
])
def test_a_flag_the_architecture_does_not_use_is_one_error_line(tmp_path, corpus_file, capsys, arch, flags, named):
    out = tmp_path / "run"
    assert lmlab("train", "--arch", arch, "--data", corpus_file, "--out", out, *flags) == 2
    one_line_error(capsys, named)
    assert not out.exists()


def test_empty_data_is_one_error_line_and_writes_nothing(tmp_path, capsys):
    empty, out = tmp_path / "empty.txt", tmp_path / "run"
    empty.write_text("  \n")
    assert lmlab("train", "--arch", "lstm", "--data", empty, "--out", out) == 2
    one_line_error(capsys, "holds no text")
    assert not out.exists()


def test_tied_embeddings_with_a_different_hidden_size_is_one_error_line(tmp_path, corpus_file, capsys):
    out = tmp_path / "run"
    assert lmlab("train", "--arch", "lstm", "--data", corpus_file, "--out", out, "--d-model", "8", "--hidden", "16",
                 "--tie-embeddings") == 2
    one_line_error(capsys, "hidden == d_model")
    assert not out.exists()


@pytest.mark.parametrize("arch", ["lstm", "window"])
def test_beam_search_on_a_stateful_model_is_deterministic(trained, capsys, arch):
    capsys.readouterr()
    args = ["generate", "--model", trained[arch], "--prompt", "Zini", "--beams", "3", "--max-new-tokens", "4", "--json"]
    assert lmlab(*args) == 0
    first = json.loads(capsys.readouterr().out)
    assert 1 <= len(first["token_ids"]) <= 4
    assert lmlab(*args) == 0
    assert json.loads(capsys.readouterr().out) == first
