"""How the weights lie in memory while decoding on the CPU.

A decoding step multiplies every weight matrix by a few rows, so its speed is how fast the weights
stream from memory, and the layout that streams fastest depends on the CPU and the row count: MKL's
`F.linear` on the plain weight, or the weight cut into contiguous column panels and multiplied as a
batched matmul (2x faster at 1 to 64 rows on one AMD EPYC, slower at one row on an Intel Xeon).
`layout_timing.py` times the candidates on the model's own weight shapes, per bucket of rows, and
`layout_cache.py` keeps the result per CPU, so the timing (1-2 s for SmolLM2-135M) happens once per
CPU and model shape.

`decoding_view(model)` is the model's module tree with every `nn.Linear` swapped for a
`LayoutLinear` that shares its parameters and multiplies in the layout chosen for its shape and
the rows at hand; generation runs the one-token steps through it and the prompt through the model
itself. A weight keeps at most one copy in another layout, made once (~0.2 s for 135M parameters)
and remade when its values change. A model whose linear weights all fit in a small cache
(`MIN_BYTES`), or whose every shape decodes fastest plain on this CPU, is its own view.
"""

import copy
import weakref

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from lmlab.generation.layout_cache import layouts_for, shape_key
from lmlab.generation.layout_timing import BUCKETS, arrange, panel_product, panel_width

MIN_BYTES = 8 << 20  # linear weights below this decode from the CPU's caches: plain, nothing measured


class LayoutLinear(nn.Module):
    """`linear` (shared, not copied) computed in the layout chosen for each bucket of rows."""

    def __init__(self, linear: nn.Linear, layouts: tuple[str, ...], panels: torch.Tensor | None):
        super().__init__()
        self.linear = linear
        self.layouts = layouts  # per bucket of `BUCKETS`; plain above the last
        self.panels = panels  # (n_panels, in, width) of the one layout besides plain; a plain attribute, not state
        # rows -> whether the panels multiply them (a lookup: this runs ~200 times a decoding step)
        self.on_panels = [False] + [layouts[next(i for i, top in enumerate(BUCKETS) if rows <= top)] != "plain"
                                    for rows in range(1, BUCKETS[-1] + 1)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.size(-1)
        if rows >= len(self.on_panels) or not self.on_panels[rows]:
            return self.linear(x)
        y = panel_product(x.reshape(rows, -1), self.panels, self.linear.out_features)  # (rows, out)
        if self.linear.bias is not None:
            y = y + self.linear.bias
        return y.view(*x.shape[:-1], -1)


def decoding_view(model: nn.Module) -> nn.Module:
    """`model` for decoding steps: on the CPU, its module tree with linear layers in the layouts
    timed fastest on this CPU (the parameters, buffers and settings shared, not copied); elsewhere,
    when its weights are sharded over processes (FSDP gathers them around each block's forward), or
    when plain is fastest for all of them, the model itself."""
    if next(model.parameters()).device.type != "cpu" or isinstance(model, FSDPModule):
        return model
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if sum(m.weight.numel() * m.weight.element_size() for m in linears) < MIN_BYTES:
        return model
    weights: dict[str, list[torch.Tensor]] = {}
    for linear in linears:
        weights.setdefault(shape_key(linear.weight), []).append(linear.weight.detach())
    layouts = layouts_for(weights)
    if all(layout == "plain" for chosen in layouts.values() for layout in chosen):
        return model
    return _view(model, layouts)


def _view(module: nn.Module, layouts: dict[str, tuple[str, ...]]) -> nn.Module:
    if isinstance(module, nn.Linear):
        chosen = layouts[shape_key(module.weight)]
        extra = next((layout for layout in chosen if layout != "plain"), None)
        return module if extra is None else LayoutLinear(module, chosen, _panels(module, extra))
    children = {name: _view(child, layouts) if child is not None else None for name, child in module._modules.items()}
    if all(children[name] is child for name, child in module._modules.items()):
        return module
    view = copy.copy(module)  # a new object sharing the old one's parameters and attributes
    view._modules = children
    return view


_PANELS: "weakref.WeakKeyDictionary[nn.Linear, tuple[tuple, torch.Tensor]]" = weakref.WeakKeyDictionary()


def _panels(linear: nn.Linear, layout: str) -> torch.Tensor:
    """The weight of `linear` in `layout`, made again only if the weight or the layout has changed since."""
    weight = linear.weight
    stamp = (weight.data_ptr(), weight.shape, weight.dtype, layout, _bit_sum(weight))
    cached = _PANELS.get(linear)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    with torch.no_grad():
        panels = arrange(weight.detach(), panel_width(layout, weight.size(0)))  # (n_panels, in, width)
    _PANELS[linear] = (stamp, panels)
    return panels


def _bit_sum(weight: torch.Tensor) -> int:
    """The sum of the weight's bit patterns as integers, each row's weighted by its index: it changes
    whenever any value changes, and when rows trade places (an unweighted sum misses two rows
    swapped: the panels would go stale). Values that trade places within a row keep it.

    The tensor's version counter cannot tell, since fused optimizers (AdamW(fused=True)) update
    weights without bumping it; one integer pass over the weights (~100 ms for 135M parameters
    on this 2-core VM) is exact and cheaper than cutting new panels.
    """
    bits = weight.detach().view({4: torch.int32, 2: torch.int16, 1: torch.int8, 8: torch.int64}[weight.element_size()])
    rows = bits.sum(dim=1, dtype=torch.int64)  # (out,)
    return int((rows * torch.arange(1, len(rows) + 1)).sum())
