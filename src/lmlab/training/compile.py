"""Opt-in `torch.compile` of the model a training loop calls.

Compiling fuses the small element-wise steps (norms, rotary, activations, residual adds) into a
few kernels. On a GPU, where a small model spends its time launching kernels, that is worth 1.3x
to 3x in a training step; on a CPU the step is mostly matrix products and gains ~5%, after a
compilation of half a minute to a minute (see benchmarks/train_throughput.py --compile).
"""

import torch
from torch import nn


def maybe_compile(model: nn.Module, enabled: bool) -> nn.Module:
    """`torch.compile(model)` if `enabled`, else `model` itself.

    The compiled module shares the parameters of `model`: build the optimizer from, and save
    checkpoints of, the uncompiled model (its state-dict names carry no `_orig_mod.` prefix).
    """
    return torch.compile(model) if enabled else model
