"""Every command that writes refuses, before any work and writing nothing, an output path where
lmlab would destroy or mix with what is not its own, or cannot write at all."""

import errno

import pytest

from conftest import lmlab, one_line_error
from lmlab.errors import LmlabError
from lmlab.io import outputs

CORPUS = "CORPUS"  # replaced by the corpus file
# Each command with its output flag last; "missing-model" proves the check comes before loading one.
RUN_COMMANDS = {
    "train": ["train", "--model", "gpt2-tiny", "--data", CORPUS, "--max-steps", "2", "--out"],
    "train-encoder": ["train", "--model", "bert-tiny", "--data", CORPUS, "--max-steps", "2", "--out"],
    "train-encoder-decoder": ["train", "--model", "t5-tiny", "--data", CORPUS, "--max-steps", "2", "--out"],
    "train-ngram": ["train", "--arch", "ngram", "--data", CORPUS, "--out"],
    "train-lstm": ["train", "--arch", "lstm", "--data", CORPUS, "--max-steps", "2", "--out"],
    "quickstart": ["quickstart", "--fast", "--out"],
    "finetune": ["finetune", "--model", "missing-model", "--task", "classify", "--data", "sentiment", "--out"],
    "sft": ["sft", "--model", "missing-model", "--data", "task", "--out"],
    "reward": ["reward", "--model", "missing-model", "--data", "task", "--out"],
    "dpo": ["dpo", "--model", "missing-model", "--data", "task", "--out"],
    "ppo": ["ppo", "--model", "missing-model", "--data", "task", "--out"],
    "seq2seq": ["seq2seq", "train", "--task", "dates", "--out"],
    "elmo": ["elmo", "train", "--data", CORPUS, "--out"],
    "experiment": ["experiment", "vanishing-gradients", "--data", CORPUS, "--out"],
    "experiment-encoder-decoder": ["experiment", "encoder-decoder-pretraining", "--out"],
}
DIR_COMMANDS = {  # write a directory whole
    "word2vec": ["word2vec", "train", "--data", CORPUS, "--out"],
    "ngram-import": ["ngram", "import", "--arpa", "missing.arpa", "--out"],
}
FILE_COMMANDS = {  # write a file
    "ngram-export": ["ngram", "export", "--model", "missing-model", "--arpa"],
    "tokenizer": ["tokenizer", "train", "--data", CORPUS, "--vocab-size", "300", "--out"],  # writes OUT/tokenizer.json
}


def run(command: list[str], out, corpus_file) -> int:
    return lmlab(*[corpus_file if arg == CORPUS else arg for arg in command], out)


def snapshot(directory) -> list:
    return sorted((str(p), p.stat().st_mtime_ns) for p in directory.rglob("*"))


@pytest.mark.parametrize("command", [*RUN_COMMANDS.values(), *DIR_COMMANDS.values(), FILE_COMMANDS["tokenizer"]],
                         ids=[*RUN_COMMANDS, *DIR_COMMANDS, "tokenizer"])
def test_an_existing_file_is_not_a_directory_to_write(command, tmp_path, corpus_file, capsys):
    out = tmp_path / "out"
    out.write_text("mine")
    before = snapshot(tmp_path)
    assert run(command, out, corpus_file) == 2
    one_line_error(capsys, command[-1], str(out), "is a file")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [*RUN_COMMANDS.values(), *DIR_COMMANDS.values(), FILE_COMMANDS["ngram-export"]],
                         ids=[*RUN_COMMANDS, *DIR_COMMANDS, "ngram-export"])
def test_a_directory_of_the_users_is_never_written_into_or_replaced(command, tmp_path, corpus_file, capsys):
    out = tmp_path / "victim"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    assert run(command, out, corpus_file) == 2
    one_line_error(capsys, command[-1], str(out))
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [*RUN_COMMANDS.values(), *DIR_COMMANDS.values(), *FILE_COMMANDS.values()],
                         ids=[*RUN_COMMANDS, *DIR_COMMANDS, *FILE_COMMANDS])
def test_an_unwritable_place_is_refused_before_any_work(command, tmp_path, corpus_file, capsys, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(outputs.tempfile, "TemporaryFile", read_only)
    before = snapshot(tmp_path)
    assert run(command, tmp_path / "out", corpus_file) == 2
    one_line_error(capsys, command[-1], "Read-only file system")
    assert snapshot(tmp_path) == before  # no tokenizer trained and saved first


def test_a_directory_without_write_permission_is_refused(tmp_path, corpus_file, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if (locked / "probe").touch() is None:  # root may write anyway
            pytest.skip("this user can write to a read-only directory")
    except PermissionError:
        assert lmlab("train", "--model", "gpt2-tiny", "--data", corpus_file, "--out", locked / "run") == 2
        one_line_error(capsys, "--out", "Permission denied")
    finally:
        locked.chmod(0o755)


def test_a_run_directory_may_be_new_empty_or_lmlabs(tmp_path):
    (tmp_path / "empty").mkdir()
    outputs.claim_run_dir(tmp_path / "run")
    (tmp_path / "run" / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "older").mkdir()  # a run of lmlab before the marker
    (tmp_path / "older" / "run.json").write_text('{"recipe": "pretrain"}')
    for path in (tmp_path / "new" / "run", tmp_path / "empty", tmp_path / "run", tmp_path / "older"):
        outputs.check_run_dir(path)


@pytest.mark.parametrize("files", [{"metrics.jsonl": "{}\n", "notes.txt": "mine"},
                                   {"config.json": "{}", "tokenizer.json": "{}", "model.safetensors": ""},
                                   {"run.json": "{}"}, {".lmlab-run": '{"format": "another"}'}])
def test_only_a_marked_run_is_a_run(tmp_path, files):
    """What a directory holds (a run's file names, an HF model) does not make it a run: only the marker does."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(LmlabError, match="not an lmlab run directory"):
        outputs.check_run_dir(tmp_path)


def test_ngram_export_keeps_the_users_directory(tmp_path, corpus_file, capsys):
    """The probe's case: `ngram export --arpa DIR` replaced the directory with the ARPA file."""
    assert lmlab("train", "--arch", "ngram", "--order", "2", "--data", corpus_file, "--out", tmp_path / "ng") == 0
    capsys.readouterr()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "a.txt").write_text("x")
    assert lmlab("ngram", "export", "--model", tmp_path / "ng", "--arpa", victim) == 2
    one_line_error(capsys, "--arpa", "is a directory")
    assert (victim / "a.txt").read_text() == "x"
    assert lmlab("ngram", "export", "--model", tmp_path / "ng", "--arpa", tmp_path / "ng.arpa") == 0
    assert lmlab("ngram", "import", "--arpa", tmp_path / "ng.arpa", "--out", tmp_path / "imported") == 0
    assert lmlab("ngram", "import", "--arpa", tmp_path / "ng.arpa", "--out", tmp_path / "imported") == 0  # its own
