"""A model config read from someone else's file: built, type-checked and bounded, or one clear line.

A config.json (or GGUF header) is input like any other: a key may be missing, a number may be a
string, NaN or 10^14. Every reader builds its config through `config_from`, so each of those
becomes one line naming the file and the key, before anything is allocated.
"""

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from lmlab.config_checks import SettingError
from lmlab.errors import LmlabError

MAX_POSITIONS = 1 << 20  # the longest context lmlab builds position tables for (Llama 3.1 has 2^17)
MAX_SIZE = 1 << 24  # any other count (vocabulary, width, layers, heads): well above every published model
MAX_TABLE = 1 << 30  # positions x d_model: the elements of a position table built before any weight is read
_POSITION_FIELDS = ("context_length", "max_source_length", "max_target_length")

Config = TypeVar("Config")


def config_from(source: str, build: Callable[[], Config], fix: str = "re-export the model") -> Config:
    """`build()`'s config (which checks its own types and ranges), bounded by `check_config`; a missing
    key, a value of the wrong type or a refused value becomes one LmlabError naming `source` (the
    file) and ending with `fix`."""
    try:
        cfg = build()
    except KeyError as e:
        raise LmlabError(f"{source} lacks the key {e}; {fix}") from None
    except SettingError as e:  # refused by the config's own checks: name the file's key, not the flag
        raise LmlabError(f"{source}: {e.field}={e.value!r} {e.problem}; fix that key or {fix}") from None
    except (TypeError, ValueError, ArithmeticError, AttributeError) as e:
        raise LmlabError(f"{source} has a value of the wrong type or range ({e}); {fix}") from None
    except LmlabError as e:
        raise LmlabError(f"{source}: {e}") from None
    check_config(cfg, source)
    return cfg


def check_config(cfg, source: str) -> None:
    """No size in the dataclass `cfg` is so large that building the model would allocate without end
    (`MAX_POSITIONS`, `MAX_SIZE`, `MAX_TABLE`): the config's own checks bound the fields a flag sets,
    these bound every count a file can set. (Types and finiteness the config checked when built.)"""
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if isinstance(value, int) and not isinstance(value, bool):
            limit = MAX_POSITIONS if field.name in _POSITION_FIELDS else MAX_SIZE
            if value > limit:
                raise LmlabError(f"{source}: {field.name}={value} is larger than lmlab builds (at most {limit}); "
                                 "the file is damaged or describes a model lmlab cannot hold")
    width = getattr(cfg, "d_model", None)
    for name in _POSITION_FIELDS:
        positions = getattr(cfg, name, None)
        if isinstance(positions, int) and isinstance(width, int) and positions * width > MAX_TABLE:
            raise LmlabError(f"{source}: {name}={positions} with d_model={width} needs a position table of "
                             f"{positions * width} numbers (at most {MAX_TABLE}); lower {name}")
