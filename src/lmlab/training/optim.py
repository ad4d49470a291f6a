"""The optimizer every recipe trains with: AdamW, decoupled weight decay on the matrices only,
linear warmup then cosine or linear decay, as one `lmlab.config.OptimConfig` sets them."""

import math
from typing import Literal

import torch
from torch import nn

from lmlab.config import OptimConfig


def build_optimizer(model: nn.Module, optim: OptimConfig) -> torch.optim.AdamW:
    """AdamW where weight decay applies to linear-layer matrices, not to norms, biases or embeddings.

    Decaying a norm gain or a bias pulls it towards an arbitrary value (0) rather than regularising;
    embeddings are lookups whose rows are updated rarely, so decay would shrink unseen tokens.
    """
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay, seen = [], [], set()
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 and id(p) not in embeddings else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=optim.lr, betas=(optim.beta1, optim.beta2), fused=True)


def build_schedule(optimizer: torch.optim.Optimizer, optim: OptimConfig,
                   max_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning-rate schedule of `optim` over a run of `max_steps` optimizer steps."""
    warmup = optim.warmup(max_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(
        step, warmup, max_steps, optim.schedule, optim.min_lr_ratio))


def lr_multiplier(step: int, warmup_steps: int, max_steps: int, schedule: Literal["cosine", "linear"],
                  min_ratio: float) -> float:
    """Linear warmup to 1 over `warmup_steps`, then cosine or linear decay to `min_ratio` at `max_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    decay = 0.5 * (1 + math.cos(math.pi * progress)) if schedule == "cosine" else 1 - progress
    return min_ratio + (1 - min_ratio) * decay
