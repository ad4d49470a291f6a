"""The `lmlab` command: one subcommand per module in this package.

Each module has `add_parser(subparsers)` and `run(args)`. A bad input (`LmlabError`) prints one
line and exits with code 2; anything else is a bug and keeps its traceback.
"""

import argparse
import sys

from lmlab.cli import eval as eval_cmd
from lmlab.cli import chat, download, dpo, generate, logprobs, ppo, quickstart, reward, sft, tokenizer, train
from lmlab.cli import elmo, embed, experiment, finetune_encoder, ngram, seq2seq, similarity, word2vec
from lmlab.cli import list as list_cmd
from lmlab.errors import LmlabError

COMMANDS = [quickstart, tokenizer, train, finetune_encoder, sft, reward, dpo, ppo, generate, chat, logprobs, embed,
            similarity, eval_cmd, experiment, download, list_cmd, ngram, seq2seq, word2vec, elmo]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: one line, exit 2
        self.exit(2, f"lmlab: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="lmlab", description="Build, train, inspect and use language models.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except LmlabError as e:
        print(f"lmlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lmlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
