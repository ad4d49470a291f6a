"""Several LoRA adapters on one frozen base, each row of a batch with its own (or none).

A server that serves a base model and some LoRA adapters of it should not hold a copy of the base
per adapter: LoRA changes a linear layer by a low-rank term only,

    y_b = W x_b + bias + s_k B_k A_k x_b        for row b using adapter k (no term for the base)

so one `MultiLoRALinear` per adapted layer keeps the base layer (shared, not copied) and every
adapter's (A_k, B_k, s_k) for that layer. Which adapter each row uses is set once per forward pass on
the `AdapterRows` all the layers share (`choose([k_0, k_1, ...])`, -1 for the base), so requests to
different adapters decode in one batch: the base product is computed once for all rows, and each
adapter's low-rank term for its own rows. A row of adapter k computes what `LoRALinear` with that
adapter alone computes.
"""

import torch
import torch.nn.functional as F
from torch import nn

BASE = -1  # a row's adapter index when it uses the base model alone


class AdapterRows:
    """Which of `count` adapters each row of the next forward pass uses: `groups` holds (k, rows) for each
    adapter in use, rows a (n,) index tensor, or None when that adapter has every row."""

    def __init__(self, count: int):
        self.count = count
        self.groups: list[tuple[int, torch.Tensor | None]] = []

    def choose(self, adapters: list[int], device: torch.device | str | None = None) -> None:
        """Row b of the next pass uses adapter `adapters[b]` (BASE: none)."""
        used = sorted(set(adapters) - {BASE})
        if len(set(adapters)) == 1:  # every row the same: no rows to pick
            self.groups = [(k, None) for k in used]
            return
        self.groups = [(k, torch.tensor([b for b, a in enumerate(adapters) if a == k], device=device))
                       for k in used]


class MultiLoRALinear(nn.Module):
    """`base` (an nn.Linear, shared) plus, for each adapter k that adapts this layer, s_k B_k A_k on the
    rows `rows` gives it. (…, in) -> (…, out), rows along the first dimension."""

    def __init__(self, base: nn.Linear, rows: AdapterRows):
        super().__init__()
        self.base = base
        self.rows = rows
        self.updates: dict[int, tuple[torch.Tensor, torch.Tensor, float]] = {}  # k -> A (r, in), B (out, r), s

    def add(self, k: int, lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float) -> None:
        """Adapter k changes this layer by scale * lora_b @ lora_a."""
        self.updates[k] = (lora_a.detach(), lora_b.detach(), scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)  # (…, out)
        for k, rows in self.rows.groups:
            if k not in self.updates:
                continue
            a, b, scale = self.updates[k]
            if rows is None:
                y = y + scale * F.linear(F.linear(x, a), b)
            else:
                y = y.index_add(0, rows, scale * F.linear(F.linear(x[rows], a), b))
        return y

    def extra_repr(self) -> str:
        return f"adapters={sorted(self.updates)}"
