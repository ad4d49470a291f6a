"""Counting what PEFT trains: the parameters that take gradients, against the whole model's."""

from torch import nn


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters that take gradients (what the optimizer should get)."""
    return [p for p in model.parameters() if p.requires_grad]


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts; a tied weight counts once."""
    return sum(p.numel() for p in trainable_parameters(model)), sum(p.numel() for p in model.parameters())


def describe(model: nn.Module) -> str:
    """E.g. "trainable 0.3M of 135.1M (0.22%)"."""
    trainable, total = count_parameters(model)
    return f"trainable {_millions(trainable)} of {_millions(total)} ({100 * trainable / total:.2f}%)"


def _millions(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 50_000 else f"{n / 1e3:.1f}K"
