"""Building `lmlab`'s parser must not import torch (seconds), so that `lmlab --help` and `lmlab COMMAND --help`
answer at once: command modules import their heavy parts inside `run()`, and what a parser lists (choices,
defaults, config classes) lives in modules without torch. Each check runs in a fresh interpreter, where nothing
is imported yet."""

import subprocess
import sys

from lmlab.cli.commands import build_parser

# Commands whose help lists what only the model registry knows (`cli/common/listings.py`): the registry, and
# torch with it, is imported when that help is shown, not when the parser is built.
HELP_READS_THE_REGISTRY = {"train"}

EVERY_HELP = f"""
import argparse, contextlib, io
from lmlab.cli.main import main

def command_paths(parser, path=()):
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_paths(sub, (*path, name))

from lmlab.cli.commands import build_parser
paths = [p for p in command_paths(build_parser()) if not p or p[0] not in {HELP_READS_THE_REGISTRY!r}]
for argv in [[*p, "--help"] for p in paths] + [["--version"], ["no-such-command"], ["generate", "--no-such-flag"]]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with contextlib.suppress(SystemExit):
            main(argv)
"""


def imports_torch(code: str) -> bool:
    """Whether running `code` in a fresh interpreter leaves torch imported."""
    check = f"{code}\nimport sys\nprint('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=120)
    return result.stdout.split()[-1] == "True"


def test_building_the_whole_parser_imports_no_torch():
    assert not imports_torch("from lmlab.cli.commands import build_parser\nbuild_parser()")


def test_every_commands_help_the_version_and_a_usage_error_import_no_torch():
    assert not imports_torch(EVERY_HELP)


def test_a_help_that_reads_the_registry_lists_it_once_when_shown():
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    model, objective = (next(a for a in train._actions if flag in a.option_strings) for flag in ("--model", "--objective"))
    assert "bert-tiny" not in model.help  # building the parser read no registry
    train.format_help()
    train.format_help()
    assert model.help.count("gpt2-tiny") == 1 and "bert-tiny" in model.help  # listed when shown, once
    assert "span_corruption" in objective.help
