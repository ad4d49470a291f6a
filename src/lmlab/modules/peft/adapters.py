"""Bottleneck adapters (Houlsby et al., 2019): a small trained MLP after each sublayer.

    h = f(x);   h + up(gelu(down(h)))        down: d_model -> bottleneck, up: bottleneck -> d_model

placed after the attention sublayer and after the feed-forward sublayer of every block, before
the residual add (both block types add the sublayer's output to the residual stream, so
wrapping `block.attention` and `block.feed_forward` is exactly "after the sublayer"). `up`
starts at zero, so a freshly applied adapter is the identity and the model computes what the
base does; training moves it away from there.
"""

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.errors import LmlabError
from lmlab.modules.peft.core import PeftModule, freeze_base


class Bottleneck(nn.Module):
    """x + up(gelu(down(x))): (…, d_model) -> (…, d_model); the identity while `up` is zero."""

    def __init__(self, d_model: int, bottleneck: int):
        super().__init__()
        self.down = nn.Linear(d_model, bottleneck)
        self.up = nn.Linear(bottleneck, d_model)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(F.gelu(self.down(x)))


class AdaptedSublayer(PeftModule):
    """A sublayer (attention or feed-forward, frozen) followed by a bottleneck adapter. Whatever
    arguments the sublayer takes (mask, rope, kv_cache for attention) pass through unchanged."""

    adds = ("adapter",)

    def __init__(self, base: nn.Module, adapter: Bottleneck):
        super().__init__()
        self.base, self.adapter = base, adapter

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        y = self.base(x, *args, **kwargs)  # (B, T, C)
        return y if self.disabled else self.adapter(y)


def apply_adapters(model: nn.Module, bottleneck: int = 64) -> nn.Module:
    """Put an adapter after the attention and the feed-forward sublayer of every block; freeze
    everything else. Returns `model` (changed in place)."""
    if bottleneck < 1:
        raise LmlabError(f"adapter bottleneck={bottleneck} must be at least 1")
    weight = next(model.parameters())
    for block in model.blocks:
        for name in ("attention", "feed_forward"):
            adapter = Bottleneck(model.config.d_model, bottleneck).to(weight.device, weight.dtype)
            setattr(block, name, AdaptedSublayer(getattr(block, name), adapter))
    freeze_base(model)
    return model
