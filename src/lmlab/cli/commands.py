"""Every `lmlab` subcommand and the parser that dispatches to them.

Importing this module imports torch and every command (seconds); `lmlab.cli.main` imports it
inside its Ctrl-C guard, so an interrupt during start-up ends as quietly as one during work.
"""

import argparse
import contextlib
import sys
from importlib.metadata import version

from lmlab.cli import (
    chat,
    download,
    elmo,
    embed,
    experiment,
    export,
    finetune,
    generate,
    inspect,
    logprobs,
    ngram,
    quantize,
    quickstart,
    rag,
    seq2seq,
    serve,
    similarity,
    tokenizer,
    train,
    word2vec,
)
from lmlab.cli import eval as eval_cmd
from lmlab.cli import list as list_cmd
from lmlab.cli.common.listings import complete_listings
from lmlab.cli.common.vocabulary import DEPRECATED, VOCABULARY
from lmlab.cli.post_training import dpo, grpo, kto, ppo, reward, sft

COMMANDS = [quickstart, tokenizer, train, finetune, sft, reward, dpo, kto, ppo, grpo, generate, chat, serve, logprobs,
            embed, similarity, eval_cmd, inspect, experiment, quantize, export, download, list_cmd, ngram, seq2seq, word2vec,
            elmo, rag]

# Renamed commands: the old words still run the new command, after one line saying so.
RENAMED = {("experiment", "seq2seq-pretraining"): ("experiment", "encoder-decoder-pretraining")}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: one line, exit 2, naming flags by their current names
        for old in DEPRECATED:
            message = message.replace(f"/{old}", "")
        self.exit(2, f"lmlab: error: {message} (see `{self.prog} --help`)\n")

    def format_help(self) -> str:  # each flag by its current name; the old ones (`DEPRECATED`) parse, unlisted
        complete_listings(self)  # the registry's presets and objectives, imported only now
        with current_spellings(self):
            return super().format_help()

    def format_usage(self) -> str:
        with current_spellings(self):
            return super().format_usage()


@contextlib.contextmanager
def current_spellings(parser: argparse.ArgumentParser):
    """While the block runs, `parser`'s flags show only their current spellings, not the `DEPRECATED` ones."""
    kept = [(action, action.option_strings) for action in parser._actions]
    for action, spellings in kept:
        action.option_strings = [s for s in spellings if s not in DEPRECATED]
    try:
        yield
    finally:
        for action, spellings in kept:
            action.option_strings = spellings


NOT_COMPUTING = {"list", "download"}  # commands that run no model: no --threads


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="lmlab", description="Build, train, inspect and use language models.")
    parser.add_argument("--version", action="version", version=f"lmlab {version('lmlab')}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(subparsers)
    for name, command in leaf_parsers(parser):
        if name.split()[0] not in NOT_COMPUTING:
            command.add_argument("--threads", type=int, metavar="N", help=VOCABULARY["--threads"])
        command.set_defaults(command_parser=command)  # where an unknown flag is reported (`parse`)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed command line; a flag the command does not know is one error pointing to that command's own
    help (`lmlab generate --help`), not to `lmlab --help`."""
    args, unknown = parser.parse_known_args(current_names(sys.argv[1:] if argv is None else argv))
    if unknown:
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def current_names(argv: list[str]) -> list[str]:
    """`argv` with a renamed command's old words (`RENAMED`) replaced by the new ones, after a warning."""
    argv = [str(word) for word in argv]
    for old, new in RENAMED.items():
        if tuple(argv[:len(old)]) == old:
            print(f"lmlab: warning: `lmlab {' '.join(old)}` is deprecated; use `lmlab {' '.join(new)}`",
                  file=sys.stderr)
            return [*new, *argv[len(old):]]
    return argv


def leaf_parsers(parser: argparse.ArgumentParser, path: str = ""):
    """(command path, parser) of every command that runs: `train`, `eval perplexity`, ..."""
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield path, parser
        return
    for name, sub in subcommands[0].choices.items():
        yield from leaf_parsers(sub, f"{path} {name}".strip())
