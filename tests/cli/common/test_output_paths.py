"""What a command writes is never what it reads: one check, made before any command runs."""

import argparse
import re

import pytest

from lmlab.cli.commands import build_parser, leaf_parsers
from lmlab.cli.common.output_paths import INPUTS, OUTPUTS, check_outputs
from lmlab.errors import LmlabError
from lmlab.io import zoo


@pytest.fixture
def model(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return tmp_path / "model"


def test_an_output_that_is_holds_or_lies_inside_an_input_is_refused(tmp_path, model):
    (tmp_path / "link").symlink_to(model)
    for out, how in [(model, "is"), (tmp_path, "holds"), (model / "q", "lies inside"), (tmp_path / "link", "is"),
                     (model / "config.json", "lies inside")]:
        with pytest.raises(LmlabError, match=f"--out '{out}' {how} the input --model"):
            check_outputs(argparse.Namespace(model=str(model), out=str(out)))


def test_an_output_beside_an_input_or_a_missing_input_is_fine(tmp_path, model):
    check_outputs(argparse.Namespace(model=str(model), out=str(tmp_path / "model2")))
    check_outputs(argparse.Namespace(model="gpt2-tiny", data="markov", out="gpt2-tiny"))  # names, not paths


def test_every_output_flag_and_a_parsers_own_are_checked(tmp_path, model):
    with pytest.raises(LmlabError, match="--png"):
        check_outputs(argparse.Namespace(model=str(model), png=str(model / "a.png")))
    with pytest.raises(LmlabError, match="--arpa '.*' is the input --model"):  # ngram export writes its --arpa
        check_outputs(argparse.Namespace(model=str(model), arpa=str(model), writes=("arpa",)))
    with pytest.raises(LmlabError, match="--data"):  # a flag given many times
        check_outputs(argparse.Namespace(data=[str(tmp_path / "a.txt"), str(model)], out=str(model / "run")))


def test_a_zoo_name_is_its_cache_directory(model):
    zoo.download_dir("smollm2-135m-instruct").mkdir(parents=True)
    with pytest.raises(LmlabError, match="lies inside the input --model '.*/smollm2-135m-instruct'"):
        check_outputs(argparse.Namespace(model="smollm2-135m-instruct",
                                         out=str(zoo.download_dir("smollm2-135m-instruct") / "q")))


# Flags whose help speaks of files or folders but that name none: what they take, and why they are not paths.
NOT_PATHS = {
    "eval_fraction": "a share of the examples",
    "val_fraction": "a share of the pairs",
    "dtype": "a number format",
    "activations": "a number format",
    "name": "the model id a server answers to",
    "integration_steps": "a count",
    "examples": "a count",
    "group_size": "a count",
}
PATHLIKE = re.compile(r"\b(file|files|folder|directory|path|dir)\b|DIR|FILE|PATH", re.IGNORECASE)


def test_every_flag_that_names_a_file_is_an_input_or_an_output():
    """A new flag taking a path must say whether the command reads or writes it (INPUTS, OUTPUTS or its
    parser's `writes`), or an output could be written over the command's own input unseen."""
    unclassified = []
    for command, parser in leaf_parsers(build_parser()):
        writes = parser.get_default("writes") or ()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.dest in {*INPUTS, *OUTPUTS, *writes, *NOT_PATHS}:
                continue
            if action.nargs == 0:  # a switch (--modelfile, --json) takes no path, whatever its help says
                continue
            if PATHLIKE.search(f"{action.help or ''} {action.metavar or ''}"):
                unclassified.append(f"{command} {action.option_strings or action.dest}")
    assert not unclassified, f"flags that may name a file, in neither INPUTS nor OUTPUTS: {unclassified}"
