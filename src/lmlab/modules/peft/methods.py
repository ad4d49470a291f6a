"""The PEFT methods by name, for the CLI's `--peft` flag and for `load_peft`."""

import inspect
from collections.abc import Callable

from torch import nn

from lmlab.errors import LmlabError
from lmlab.modules.peft.adapters import AdaptedSublayer, apply_adapters
from lmlab.modules.peft.lora import LoRALinear, apply_lora
from lmlab.modules.peft.prefix import PrefixAttention, apply_prefix
from lmlab.modules.peft.prompt import PromptTuning, apply_prompt_tuning

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


def applied_method(model: nn.Module) -> tuple[str, dict]:
    """(method, settings) of the PEFT applied to `model`, read off its modules (an adapter loaded from
    peft's files has no lmlab settings of its own): ("none", {}) when none is."""
    modules = [m for m in model.modules() if isinstance(m, LoRALinear | AdaptedSublayer | PrefixAttention
                                                                     | PromptTuning)]
    if not modules:
        return "none", {}
    first = modules[0]
    if isinstance(first, LoRALinear):
        names = [name for name, m in model.named_modules() if isinstance(m, LoRALinear)]
        return "lora", {"rank": first.rank, "alpha": first.scale * first.rank, "dropout": first.dropout.p,
                        "targets": names}
    if isinstance(first, AdaptedSublayer):
        return "adapter", {"bottleneck": first.adapter.down.out_features}
    if isinstance(first, PrefixAttention):
        return "prefix", {"n_prefix": first.prefix_k.shape[1]}
    return "prompt", {"n_tokens": first.embeddings.shape[0]}
