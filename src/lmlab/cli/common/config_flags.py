"""A config dataclass as command-line flags: one optional flag per field, and back.

Every `lmlab` command that takes a frozen config (`ModelConfig`, `TrainConfig`, `PostTrainConfig`,
`PPOConfig`, …) exposes its fields this way, so a new field is a new flag with no CLI code. A field
that is itself a config (`optim: OptimConfig`) gives its fields as flags of their own (`--lr`,
`--warmup-steps`), changed from the default the outer config gives it.
"""

import argparse
import dataclasses
import functools
import inspect
import linecache
import re
import tokenize
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


def add_config_flags(group, cls, skip=(), defaults=None) -> None:
    """One optional flag per field of dataclass `cls` (except `skip`), typed from its annotation:
    a Literal (or `metadata={"choices": …}`) gives choices, a bool `--x/--no-x`; unset flags stay None
    (keep the default). The flag's help is the field's `metadata={"help": …}`, else the comment that
    ends its line in the class, followed by its default (`defaults`'s value: a nested config's default
    comes from the config that holds it, as PostTrainConfig's lr 2e-4 for OptimConfig's 6e-4). Each flag
    remembers its field (`action.config_field`, "TrainConfig.max_steps"): the field documents it."""
    comments = field_comments(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = getattr(defaults, f.name) if defaults is not None else f.default
        if dataclasses.is_dataclass(f.type):
            add_config_flags(group, f.type, skip, default)
            continue
        help_text = f.metadata.get("help") or comments.get(f.name)
        if help_text is not None and default is not dataclasses.MISSING:
            help_text = f"{help_text} (default {default if default is not None else 'none'})".replace("%", "%%")
        choices = typing.get_args(f.type) if typing.get_origin(f.type) is typing.Literal else f.metadata.get("choices")
        kind = typing.get_args(f.type) or (f.type,)
        kind = next((k for k in kind if k in (int, float, bool, str)), str)
        if choices is not None:
            action = group.add_argument(flag_name(f.name), dest=f.name, choices=choices, default=None, help=help_text)
        elif kind is bool:
            action = group.add_argument(flag_name(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                                        default=None, help=help_text)
        else:
            action = group.add_argument(flag_name(f.name), dest=f.name, type=kind, default=None,
                                        metavar=kind.__name__.upper(), help=help_text)
        action.config_field = f"{cls.__name__}.{f.name}"


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


@functools.cache  # reading a class's source parses its module: once per class, not once per parser built
def field_comments(cls) -> dict[str, str]:
    """The comment that ends each field's line in the source of dataclass `cls` (`lr: float = 6e-4  #
    the peak learning rate` -> {"lr": "the peak learning rate"}): the field's description, kept where
    a reader of the class sees it and turned into its flag's help."""
    lines = class_lines(cls)
    comments = {}
    for token in tokenize.generate_tokens(iter(lines).__next__):
        if token.type != tokenize.COMMENT:
            continue
        code = token.line[:token.start[1]]
        field = _FIELD.match(code)
        if field:
            comments[field[1]] = token.string.lstrip("#").strip()
    return comments


_FIELD = re.compile(r"^    (\w+)\s*:")  # a field of the class body (not of a nested class or method)


def class_lines(cls) -> list[str]:
    """The source lines of the module-level class `cls`, from `class` to the next unindented line: found by
    reading its file's lines, not by `inspect.getsource`, which parses the whole module (a tenth of a second
    for lmlab.config) and would make `lmlab --help` wait; [] without a source (a frozen application)."""
    try:
        lines = linecache.getlines(inspect.getsourcefile(cls))
    except TypeError:  # a class without a file
        return []
    header = re.compile(rf"class {cls.__name__}\b")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        return []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i][0].isspace()), len(lines))
    while not lines[end - 1].strip():
        end -= 1
    return lines[start:end]
