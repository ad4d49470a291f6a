"""What a new user meets first: `lmlab --version`, an unknown flag pointing to the command's own help, and `--help`
showing each flag by one name (the old spellings still parse, with a warning: tests/cli/common/test_vocabulary.py)."""

import subprocess
import sys
from importlib.metadata import version

import pytest

from conftest import lmlab
from lmlab.cli.commands import build_parser, leaf_parsers
from lmlab.cli.common.vocabulary import DEPRECATED


def test_version_prints_the_installed_version():
    done = subprocess.run([sys.executable, "-m", "lmlab.cli.main", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"lmlab {version('lmlab')}"


@pytest.mark.parametrize("argv, help_of", [
    (["generate", "--model", "m", "--prompt", "p", "--max_new_tokens", "3"], "lmlab generate"),
    (["eval", "perplexity", "--model", "m", "--data", "markov", "--bogus"], "lmlab eval perplexity"),
])
def test_an_unknown_flag_points_to_the_commands_own_help(capsys, argv, help_of):
    with pytest.raises(SystemExit) as exited:
        lmlab(*argv)
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1
    assert "unrecognized arguments" in err and err.endswith(f"(see `{help_of} --help`)")


def test_help_shows_each_flag_by_its_current_name_only():
    shown = {command: parser.format_help() for command, parser in leaf_parsers(build_parser())}
    old = {(command, name) for command, text in shown.items() for name in DEPRECATED
           if f"{name} " in text or f"{name}," in text or f"{name}\n" in text}
    assert not old, old
    assert "--data DATA" in shown["eval perplexity"] and "--max-steps" in shown["quickstart"]


def test_a_missing_required_flag_is_named_by_its_current_name(capsys):
    with pytest.raises(SystemExit):
        lmlab("eval", "perplexity", "--model", "m")
    assert "--data (see" in capsys.readouterr().err


SMALL_MODEL = ["--context-length", "32", "--n-layers", "1", "--n-heads", "2", "--d-model", "16", "--d-ff", "32"]
RUN = ["--max-steps", "1", "--batch-size", "2", "--block-size", "16", "--eval-every", "1"]


@pytest.mark.parametrize("asked, warned", [([], False), (["--vocab-size", "2000"], True)])
def test_a_vocabulary_the_text_cannot_fill_is_said_only_when_the_user_asked_for_it(tmp_path, capsys, asked, warned):
    data = tmp_path / "small.txt"
    data.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 40)  # far fewer merges than 2000 or the preset's 4096
    assert lmlab("train", "--model", "gpt2-tiny", *SMALL_MODEL, *asked, *RUN, "--data", data,
                 "--out", tmp_path / "run") == 0
    err = capsys.readouterr().err
    assert ("asked for a vocabulary of 2000 tokens, but the text gives only" in err) == warned, err
    assert "vocabulary of 4096" not in err  # gpt2-tiny's own size is a ceiling nobody asked for
