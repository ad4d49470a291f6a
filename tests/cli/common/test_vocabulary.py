"""One vocabulary of flags: every command's parser is walked, and a flag outside the vocabulary, a flag
without help, a choice-valued flag that hides its choices, or an old name used as a flag's own name fails."""

import argparse
import re

import pytest

from conftest import lmlab, one_line_error
from lmlab.cli.commands import NOT_COMPUTING, build_parser, leaf_parsers
from lmlab.cli.common.vocabulary import DEPRECATED, VOCABULARY


def flags():
    """(command, action) for every optional flag of every command."""
    for command, parser in leaf_parsers(build_parser()):
        for action in parser._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                yield command, action


def test_every_flag_is_in_the_vocabulary_or_is_a_config_field():
    outside = [f"{command} {action.option_strings[0]}" for command, action in flags()
               if action.option_strings[0] not in VOCABULARY and not hasattr(action, "config_field")]
    assert not outside, f"flags outside lmlab.cli.common.vocabulary: {outside}"


def test_old_names_are_only_second_spellings():
    misuses = [f"{command} {action.option_strings}" for command, action in flags()
               if action.option_strings[0] in DEPRECATED
               or any(name not in DEPRECATED for name in action.option_strings[1:]
                      if not name.startswith("--no-"))]
    assert not misuses, misuses


def test_every_flag_and_argument_has_help():
    missing = [f"{command} {action.option_strings or action.dest}" for command, parser in leaf_parsers(build_parser())
               for action in parser._actions
               if not isinstance(action, argparse._HelpAction) and not action.help]
    assert not missing, f"without help: {missing}"


def test_choice_valued_flags_list_their_choices():
    """A flag whose help says "one of" or "choose" either has argparse choices or lists the values right there
    ("one of ['stdlib', 'markov']", "choose from a, b"): not a name of a constant in the code."""
    listed = re.compile(r"(one of|choose from|choose)\s*(\[|\{|\(|[\w.-]+,)")
    hidden = [f"{command} {action.option_strings[0]}" for command, action in flags()
              if action.choices is None and re.search(r"one of|choose", action.help or "")
              and not listed.search(action.help)]
    assert not hidden, f"these flags name a set of values but do not list it: {hidden}"


def test_every_command_that_computes_takes_threads():
    for command, parser in leaf_parsers(build_parser()):
        has = any("--threads" in action.option_strings for action in parser._actions)
        assert has == (command.split()[0] not in NOT_COMPUTING), command


@pytest.mark.parametrize("old, new, command", [
    ("--k", "top", ["word2vec", "neighbors", "--model", "m", "--word", "w"]),
    ("--file", "data", ["eval", "perplexity", "--model", "m"]),
    ("--train", "data", ["finetune", "--model", "m", "--task", "classify", "--out", "o"]),
    ("--steps", "max_steps", ["quickstart"]),
    ("--corpus", "corpus", ["experiment", "encoder-decoder-pretraining", "--out", "o"]),
])
def test_an_old_name_still_works_and_says_what_replaced_it(old, new, command, capsys):
    args = build_parser().parse_args([*command, old, "7"])
    assert getattr(args, new) in (7, "7")
    assert f"lmlab: warning: {old} is deprecated; use --" in capsys.readouterr().err


def test_threads_below_one_is_one_line(capsys):
    assert lmlab("eval", "perplexity", "--model", "m", "--data", "d", "--threads", "0") == 2
    one_line_error(capsys, "--threads must be at least 1, got 0")
