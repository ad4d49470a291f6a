"""Placeholder: replaced by the module that adds this subcommand."""


def add_parser(subparsers) -> None:
    """Adds nothing yet."""
