"""The checks every config dataclass runs in `__post_init__`, so a bad setting fails where it enters.

Each message is one line that names the command-line flag (`--n-heads`, not `n_heads`; a class whose
field and flag differ passes `flags`), the value, and what would be valid. Upper bounds keep an absurd
size (10^6 layers, a 2^32-token context, read from a flag or a file) from reaching an allocation.
"""

import dataclasses
import math
import numbers
import types
import typing

from lmlab.errors import LmlabError

MAX_CONTEXT = 2**20  # tokens per sequence: 128x SmolLM2's 8192, and a position table still under a few GB
MAX_LAYERS = 1024
MAX_WIDTH = 2**17  # d_model, d_ff, hidden sizes
MAX_VOCAB = 2**22  # the largest published vocabularies hold ~2^18 tokens
MAX_BATCH = 2**20  # sequences per step: the batch's index arrays alone are allocated up front
MAX_EPS = 1.0  # a normalisation epsilon above this swamps the variance it guards
MAX_ROPE_BASE = 1e12  # published models use 10^4 to 10^7
MAX_SEED = 2**63 - 1  # torch.manual_seed takes a signed 64-bit number
# Below this temperature, logits / T overflows float32 (1e-45 is a float32 denormal; 1e-310 rounds to 0) and
# sampling is argmax in all but name: ask for 0 instead. vLLM raises such temperatures to the same 0.01.
MIN_TEMPERATURE = 0.01
MAX_RAG_TOP = 50  # passages one chat request to `lmlab serve --rag` may ask retrieval for


class SettingError(LmlabError):
    """A refused setting: the message names its flag; `field`, `value` and `problem` let a reader of a
    config file name the file's key instead."""

    def __init__(self, field: str, value, problem: str, flags: dict[str, str] | None = None):
        super().__init__(f"{flag(field, flags)} {value!r} {problem}" if isinstance(value, str) else
                         f"{flag(field, flags)} {value} {problem}")
        self.field, self.value, self.problem = field, value, problem


def flag(name: str, flags: dict[str, str] | None = None) -> str:
    """The command-line flag that sets field `name`: `n_layers` -> `--n-layers`, unless `flags` renames it."""
    return (flags or {}).get(name) or "--" + name.replace("_", "-")


def check_types(cfg, flags: dict[str, str] | None = None) -> None:
    """Every field of dataclass `cfg` holds a value of its annotated type (a Literal: one of its
    choices; float: a finite number), so a mistyped value read from a file fails here, by name."""
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        problem = _type_problem(value, field.type)
        if problem:
            raise SettingError(field.name, value, problem, flags)


def at_least(cfg, low: float, *names: str, flags: dict[str, str] | None = None) -> None:
    """Each field in `names` (unset fields, None, are skipped) is >= `low`."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and value < low:
            raise SettingError(name, value, f"must be at least {low}", flags)


def at_most(cfg, high: float, *names: str, flags: dict[str, str] | None = None) -> None:
    """Each field in `names` (None is skipped) is <= `high`: a guard before anything of that size is allocated."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and value > high:
            raise SettingError(name, value, f"is more than lmlab supports (at most {high:,})", flags)


def positive(cfg, *names: str, flags: dict[str, str] | None = None) -> None:
    """Each field in `names` (None is skipped) is > 0."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and not value > 0:
            raise SettingError(name, value, "must be greater than 0", flags)


def fraction(cfg, name: str, upper_included: bool = False, flags: dict[str, str] | None = None) -> None:
    """Field `name` lies in [0, 1), or in [0, 1] with `upper_included`."""
    value = getattr(cfg, name)
    if not (0 <= value <= 1 if upper_included else 0 <= value < 1):
        raise SettingError(name, value, f"must lie in [0, 1{']' if upper_included else ')'}", flags)


# attention methods (`lmlab.modules.efficient_attention`) whose every output mixes the whole sequence
BIDIRECTIONAL_ATTENTION = {"linformer": "projects keys along the whole sequence",
                           "nystrom": "averages its landmarks over the whole sequence"}


def check_causal_attention(method: str) -> None:
    """Refuse, in one line, an attention method that has no causal form, for a causal model."""
    if method in BIDIRECTIONAL_ATTENTION:
        raise LmlabError(f"--attention {method} {BIDIRECTIONAL_ATTENTION[method]}, so every token would see the "
                         "future: it has no causal form; use it in an encoder, or choose window, bigbird, lsh or "
                         "performer")


def _type_problem(value, annotation) -> str | None:
    """Why `value` does not fit `annotation`, or None when it does (or the annotation is not a simple one)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        return None if value in choices else f"is not one of: {', '.join(map(str, choices))}"
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        problems = [_type_problem(value, option) for option in options]
        return None if None in problems else problems[0]
    if annotation is type(None):
        return None if value is None else "must be unset"
    if annotation is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if annotation is int:  # numbers.Integral: numpy's integers (read from GGUF, safetensors) count too
        return None if isinstance(value, numbers.Integral) and not isinstance(value, bool) else "must be a whole number"
    if annotation is float:
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            return "must be a number"
        return None if math.isfinite(value) else "must be a finite number"
    if annotation is str:
        return None if isinstance(value, str) else "must be text"
    return None
