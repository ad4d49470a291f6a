"""What every PEFT module shares: an off switch, and a list of the parameters it adds.

Parameter-efficient fine-tuning freezes a trained model and trains a few new parameters that
PEFT modules add to it. Each such module is a `PeftModule`: it names what it adds in `adds`
(those are the parameters that are trained and saved) and can be switched off, which makes
the model compute exactly what the frozen base computes (the DPO reference model is the same
network with its adapters off). The helpers here act on every PEFT module of a model at once.
"""

import contextlib
from collections.abc import Iterator

from torch import nn


class PeftModule(nn.Module):
    """A module added by PEFT. `adds` names its new parameters or submodules; `disabled` turns it off."""

    adds: tuple[str, ...] = ()

    def __init__(self):
        super().__init__()
        self.disabled = False


def peft_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters PEFT added to `model`, by dotted name: what is trained and what `save_peft` writes."""
    added = {}
    for module_name, module in model.named_modules():
        if not isinstance(module, PeftModule):
            continue
        for name, p in module.named_parameters():
            if name.split(".")[0] in module.adds:
                added[f"{module_name}.{name}" if module_name else name] = p
    return added


def added_module_names(model: nn.Module) -> list[str]:
    """Dotted names of the submodules and parameters PEFT added (so LoRA never targets an adapter's own layers)."""
    return [f"{name}.{a}" if name else a for name, m in model.named_modules() if isinstance(m, PeftModule)
            for a in m.adds]


def freeze_base(model: nn.Module) -> None:
    """Train only what PEFT added: every other parameter stops taking gradients."""
    added = {id(p) for p in peft_parameters(model).values()}
    for p in model.parameters():
        p.requires_grad_(id(p) in added)


def peft_modules(model: nn.Module) -> Iterator[PeftModule]:
    """Every PEFT module inside `model`."""
    return (m for m in model.modules() if isinstance(m, PeftModule))


@contextlib.contextmanager
def adapters_disabled(model: nn.Module):
    """Within the block every PEFT module (LoRA, adapters, prefix, prompt) is off, so `model`
    computes what its frozen base computes; each module's switch is restored afterwards."""
    modules = list(peft_modules(model))
    before = [m.disabled for m in modules]
    for m in modules:
        m.disabled = True
    try:
        yield model
    finally:
        for m, disabled in zip(modules, before):
            m.disabled = disabled
