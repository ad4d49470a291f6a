"""A config dataclass as command-line flags: one optional flag per field, and back.

Every `lmlab` command that takes a frozen config (`ModelConfig`, `TrainConfig`, `FinetuneConfig`,
`PPOConfig`, …) exposes its fields this way, so a new field is a new flag with no CLI code. A field
that is itself a config (`optim: OptimConfig`) gives its fields as flags of their own (`--lr`,
`--warmup-steps`), changed from the default the outer config gives it.
"""

import argparse
import dataclasses
import typing


def flag_name(field: str) -> str:
    """`n_layers` -> `--n-layers`."""
    return "--" + field.replace("_", "-")


def flag_fields(cls) -> set[str]:
    """The settings of config class `cls` that are flags: its fields, a nested config's (`optim`)
    in its place."""
    names = set()
    for f in dataclasses.fields(cls):
        names |= flag_fields(f.type) if dataclasses.is_dataclass(f.type) else {f.name}
    return names


def add_config_flags(group, cls, skip=()) -> None:
    """One optional flag per field of dataclass `cls` (except `skip`), typed from its annotation:
    a Literal gives choices, a bool `--x/--no-x`; unset flags stay None (keep the default). A field's
    `metadata={"help": …}` is the flag's help text."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if dataclasses.is_dataclass(f.type):
            add_config_flags(group, f.type, skip)
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
    """The fields of `cls` that were set on the command line, as keyword arguments (a nested
    config: its default's `replace` with the flags that were set)."""
    overrides = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.type):
            nested = config_overrides(args, f.type)
            if nested:
                overrides[f.name] = f.default.replace(**nested)  # the nested config's own rules apply
        elif getattr(args, f.name, None) is not None:
            overrides[f.name] = getattr(args, f.name)
    return overrides
