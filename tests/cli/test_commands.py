"""The command list (`cli/commands.py`): a contributor finds a command's module from its name, `cli/` holds
commands, not helpers, and a renamed command still runs under its old words, after one warning line."""

import importlib
from pathlib import Path

import lmlab.cli
from lmlab.cli.commands import RENAMED, build_parser, leaf_parsers, parse

CLI = Path(lmlab.cli.__file__).parent
MACHINERY = {"__init__", "main", "commands", "reference"}  # the command line itself, not a command
FAMILIES = {"common": "helpers every command family shares", "post_training": "lmlab sft | reward | dpo | ppo"}


def module_names(words: list[str]) -> set[str]:
    """Where `lmlab WORDS...` may live: lmlab.cli.<first>[.<second>...], or lmlab.cli.post_training.<first>."""
    names = [w.replace("-", "_") for w in words]
    return {"lmlab.cli." + ".".join(names[:k]) for k in range(1, len(names) + 1)} | {
        f"lmlab.cli.post_training.{names[0]}"}


def test_each_command_runs_from_the_module_its_name_names():
    misplaced = {}
    for path, parser in leaf_parsers(build_parser()):
        run = parser.get_default("run")
        if run.__module__ not in module_names(path.split()):
            misplaced[path] = run.__module__
    assert not misplaced, f"commands whose module their name does not name: {misplaced}"


def test_the_cli_folder_holds_commands_and_one_folder_per_command_family():
    commands = {path.split()[0].replace("-", "_") for path, _ in leaf_parsers(build_parser())}
    files = {p.stem for p in CLI.glob("*.py")} - MACHINERY
    folders = {p.name for p in CLI.iterdir() if (p / "__init__.py").is_file()} - set(FAMILIES)
    assert files | folders <= commands, f"modules in cli/ that are no command: {(files | folders) - commands}"
    for folder in folders | set(FAMILIES):
        importlib.import_module(f"lmlab.cli.{folder}")


def test_seq2seq_names_only_the_rnn_command():
    parser = build_parser()
    paths = [path for path, _ in leaf_parsers(parser) if "seq2seq" in path]
    assert paths and all(path.startswith("seq2seq ") for path in paths), paths
    for path, command in leaf_parsers(parser):
        for action in command._actions:
            assert "seq2seq" not in (action.choices or ()), f"lmlab {path} {action.option_strings} offers seq2seq"


def test_a_renamed_command_runs_as_the_new_one_after_a_warning(capsys):
    for old, new in RENAMED.items():
        args = parse(build_parser(), [*old, "--out", "somewhere"])
        assert args.run is parse(build_parser(), [*new, "--out", "somewhere"]).run
        assert capsys.readouterr().err == (f"lmlab: warning: `lmlab {' '.join(old)}` is deprecated; "
                                           f"use `lmlab {' '.join(new)}`\n")
        assert old[-1] not in build_parser()._subparsers._group_actions[0].choices[old[0]].format_help()
