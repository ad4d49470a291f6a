"""Every `lmlab` subcommand and the parser that dispatches to them.

Importing this module imports torch and every command (seconds); `lmlab.cli.main` imports it
inside its Ctrl-C guard, so an interrupt during start-up ends as quietly as one during work.
"""

import argparse

from lmlab.cli import eval as eval_cmd
from lmlab.cli import chat, download, dpo, generate, logprobs, ppo, quickstart, reward, serve, sft, tokenizer, train
from lmlab.cli import elmo, embed, experiment, finetune_encoder, inspect, ngram, quantize, seq2seq, similarity, word2vec
from lmlab.cli import list as list_cmd

COMMANDS = [quickstart, tokenizer, train, finetune_encoder, sft, reward, dpo, ppo, generate, chat, serve, logprobs,
            embed, similarity, eval_cmd, inspect, experiment, quantize, download, list_cmd, ngram, seq2seq, word2vec,
            elmo]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: one line, exit 2
        self.exit(2, f"lmlab: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="lmlab", description="Build, train, inspect and use language models.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser
