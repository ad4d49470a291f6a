"""The command-line reference, written from the parsers themselves, so the documentation cannot drift.

`cli_reference()` is every command: what it does, its usage line and a table of its flags with their
help; `flag_vocabulary()` is the vocabulary every command's flags come from. The docs site's hook
(docs/hooks/reference.py) puts them into docs/cli.md and docs/flags.md at build time.
"""

import argparse

from lmlab.cli.commands import build_parser, leaf_parsers
from lmlab.cli.common.vocabulary import DEPRECATED, VOCABULARY


def cli_reference() -> str:
    """Markdown: one section per command (`lmlab train`, `lmlab eval perplexity`, ...)."""
    root = build_parser()
    summaries = _summaries(root)
    sections = []
    for command, parser in leaf_parsers(root):
        rows = [_row(action) for action in parser._actions if not isinstance(action, argparse._HelpAction)]
        usage = parser.format_usage().removeprefix("usage: ").strip()
        sections.append("\n".join([
            f"## `lmlab {command}`", "", _text(parser.description or summaries.get(command, "")), "",
            "```text", usage, "```", "",
            "| flag | what it sets |", "|---|---|", *rows, ""]))
    return "\n".join(sections)


def flag_vocabulary() -> str:
    """Markdown: the vocabulary's flags and meanings, then the old names that still work."""
    rows = [f"| `{flag}` | {_cell(meaning)} |" for flag, meaning in sorted(VOCABULARY.items())]
    old = ", ".join(f"`{name}`" for name in sorted(DEPRECATED))
    return "\n".join(["| flag | meaning in every command that has it |", "|---|---|", *rows, "",
                      f"Old names that still work, with a warning naming their replacement: {old}.", ""])


def _summaries(parser: argparse.ArgumentParser, path: str = "") -> dict[str, str]:
    """Each command's one-line help, as its parent parser lists it, by command path."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                command = f"{path} {name}".strip()
                found[command] = helps.get(name) or ""
                found |= _summaries(sub, command)
    return found


def _row(action: argparse.Action) -> str:
    current = [name for name in action.option_strings if name not in DEPRECATED]
    names = ", ".join(f"`{name}`" for name in current) or f"`{action.metavar or action.dest}`"
    help_text = (action.help or "") % {"default": action.default} if "%(default)" in (action.help or "") \
        else (action.help or "")
    if action.choices is not None:
        help_text += f" (one of: {', '.join(map(str, action.choices))})"
    if action.required:
        help_text = "**required**; " + help_text
    return f"| {names} | {_cell(help_text)} |"


def _cell(text: str) -> str:
    """`text` in a table cell: no line breaks, `|` escaped, and `[` escaped so that "[CLS] [SEP]" in a help
    text is not read as a Markdown reference."""
    return text.replace("%%", "%").replace("|", "\\|").replace("[", "\\[").replace("\n", " ")


def _text(text: str) -> str:
    return text.replace("%%", "%")
