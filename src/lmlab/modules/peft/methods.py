"""The PEFT methods by name, for the CLI's `--peft` flag and for `load_peft`."""

import inspect
from collections.abc import Callable

from torch import nn

from lmlab.errors import LmlabError
from lmlab.modules.peft.adapters import apply_adapters
from lmlab.modules.peft.lora import apply_lora
from lmlab.modules.peft.prefix import apply_prefix
from lmlab.modules.peft.prompt import apply_prompt_tuning

METHODS: dict[str, Callable[..., nn.Module]] = {
    "lora": apply_lora,
    "adapter": apply_adapters,
    "prefix": apply_prefix,
    "prompt": apply_prompt_tuning,
}


def peft_method(name: str) -> Callable[..., nn.Module]:
    """The `apply_*` function of method `name` (lora, adapter, prefix, prompt)."""
    if name not in METHODS:
        raise LmlabError(f"unknown PEFT method '{name}'; choose one of: {', '.join(METHODS)}, none")
    return METHODS[name]


def apply_peft(model: nn.Module, method: str, **settings) -> nn.Module:
    """Apply PEFT method `method` ("none" leaves the model as it is, fully trainable) with its
    `settings` (e.g. rank=8 for lora). Returns `model` (changed in place)."""
    if method == "none":
        return model
    apply = peft_method(method)
    valid = list(inspect.signature(apply).parameters)[1:]
    unknown = sorted(set(settings) - set(valid))
    if unknown:
        raise LmlabError(f"unknown setting(s) {', '.join(unknown)} for PEFT method '{method}'; "
                         f"valid: {', '.join(valid)}")
    return apply(model, **settings)
