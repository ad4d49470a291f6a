"""How the weights lie in memory while decoding on the CPU.

A decoding step multiplies every weight matrix by a few rows, so its speed is how fast the
weights stream from memory. For a handful of rows, MKL (which runs torch's fp32 `F.linear` on
the CPU) reads an `nn.Linear` weight at about 10 GB/s, well under what the memory gives (24 GB/s
on one core of the AMD EPYC we measured on, 31 GB/s on two). Cut into column panels, W (out, in)
stored as (out / 16, in, 16) with every panel one contiguous block, the same product becomes a
batched matmul that reads the weights at 22-27 GB/s: about 2x faster for 1 to 64 rows (SmolLM2-135M's
121 matrices, weights not in cache). From ~128 rows on the plain layout wins, so prompts (a real
matrix-matrix product) keep it.

`decoding_view(model)` is the model's module tree with every `nn.Linear` swapped for a
`PanelLinear` that shares its parameters; generation runs the one-token steps through it and the
prompt through the model itself. Panels are made once per weight (one extra copy of the linear
weights, ~0.2 s for 135M parameters) and remade when its values change.
"""

import copy
import weakref

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

PANEL = 16  # output features per panel
MAX_ROWS = 64  # above this many rows, the plain layout is faster


class PanelLinear(nn.Module):
    """`linear` (shared, not copied) computed from its weight cut into column panels."""

    def __init__(self, linear: nn.Linear, panels: torch.Tensor):
        super().__init__()
        self.linear = linear
        self.panels = panels  # (out_padded / PANEL, in, PANEL); a plain attribute, not state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.size(-1)
        if rows > MAX_ROWS:
            return self.linear(x)
        out = self.linear.out_features
        y = torch.matmul(x.reshape(rows, -1), self.panels)  # (n_panels, rows, PANEL)
        y = y.transpose(0, 1).reshape(rows, -1)[:, :out]  # (rows, out)
        if self.linear.bias is not None:
            y = y + self.linear.bias
        return y.view(*x.shape[:-1], out)


def decoding_view(model: nn.Module) -> nn.Module:
    """`model` for decoding steps: on the CPU, its module tree with linear layers on panels (the
    parameters, buffers and settings shared, not copied); elsewhere, or when its weights are
    sharded over processes (FSDP gathers them around each block's forward), the model itself."""
    if next(model.parameters()).device.type != "cpu" or isinstance(model, FSDPModule):
        return model
    return _view(model)


def _view(module: nn.Module) -> nn.Module:
    if isinstance(module, nn.Linear):
        return PanelLinear(module, _panels(module))
    children = {name: _view(child) if child is not None else None for name, child in module._modules.items()}
    if all(children[name] is child for name, child in module._modules.items()):
        return module
    view = copy.copy(module)  # a new object sharing the old one's parameters and attributes
    view._modules = children
    return view


_PANELS: "weakref.WeakKeyDictionary[nn.Linear, tuple[tuple, torch.Tensor]]" = weakref.WeakKeyDictionary()


def _panels(linear: nn.Linear) -> torch.Tensor:
    """The weight of `linear` as panels, made again only if the weight has changed since."""
    weight = linear.weight
    stamp = (weight.data_ptr(), weight.shape, weight.dtype, _bit_sum(weight))
    cached = _PANELS.get(linear)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    with torch.no_grad():
        w = weight.detach()  # (out, in)
        w = torch.nn.functional.pad(w, (0, 0, 0, -w.size(0) % PANEL))  # out padded to a multiple of PANEL
        panels = w.t().reshape(w.size(1), -1, PANEL).transpose(0, 1).contiguous()  # (n_panels, in, PANEL)
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
