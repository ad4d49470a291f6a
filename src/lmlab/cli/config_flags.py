"""A config dataclass as command-line flags: one optional flag per field, and back.

Every `lmlab` command that takes a frozen config (`ModelConfig`, `TrainConfig`, `FinetuneConfig`,
`PPOConfig`, …) exposes its fields this way, so a new field is a new flag with no CLI code.
"""

import argparse
import dataclasses
import typing


def flag_name(field: str) -> str:
    """`n_layers` -> `--n-layers`."""
    return "--" + field.replace("_", "-")


def add_config_flags(group, cls, skip=()) -> None:
    """One optional flag per field of dataclass `cls` (except `skip`), typed from its annotation:
    a Literal gives choices, a bool `--x/--no-x`; unset flags stay None (keep the default). A field's
    `metadata={"help": …}` is the flag's help text."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        help_text = f.metadata.get("help")
        if typing.get_origin(f.type) is typing.Literal:
            group.add_argument(flag_name(f.name), dest=f.name, choices=typing.get_args(f.type), default=None,
                               help=help_text)
            continue
        kind = typing.get_args(f.type) or (f.type,)
        kind = next((k for k in kind if k in (int, float, bool, str)), str)
        if kind is bool:
            group.add_argument(flag_name(f.name), dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                               help=help_text)
        else:
            group.add_argument(flag_name(f.name), dest=f.name, type=kind, default=None, metavar=kind.__name__.upper(),
                               help=help_text)


def config_overrides(args: argparse.Namespace, cls) -> dict:
    """The fields of `cls` that were set on the command line, as keyword arguments."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
            if getattr(args, f.name, None) is not None}
