"""LoRA (Hu et al., 2021): a frozen linear layer plus a trained low-rank update.

    y = W x + b + (alpha / rank) * B A dropout(x)        A: (rank, in), B: (out, rank)

A starts random (Kaiming-uniform, as nn.Linear and the reference implementation do) and B at
zero, so a freshly applied LoRA computes exactly what the base layer does. `LoRALinear` is a
drop-in replacement for `nn.Linear`: it keeps the base layer's `weight` and `bias` under the
same names (a base checkpoint still fits), adds `lora_a` / `lora_b`, can be switched off, and
can fold B A into `weight` (`merge`) for inference at no extra cost.

Our attention projects q, k and v with one fused layer (`qkv`) and SwiGLU projects gate and up
with one (`gate_up`), so targeting `qkv` adapts q, k and v together with one A and one B (a
rank-r update of the stacked matrix), and `gate_up` adapts gate and up together.
"""

import fnmatch
import math

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.errors import LmlabError
from lmlab.modules.peft.core import PeftModule, added_module_names, freeze_base, peft_modules


class LoRALinear(PeftModule):
    """`base` (an nn.Linear, frozen) plus a rank-`rank` update scaled by alpha / rank."""

    adds = ("lora_a", "lora_b")

    def __init__(self, base: nn.Linear, rank: int = 8, alpha: float = 16.0, dropout: float = 0.0):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight  # (out, in), shared with the base layer (and any weight tied to it)
        self.register_parameter("bias", base.bias)
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.rank, self.scale = rank, alpha / rank
        kind = dict(dtype=base.weight.dtype, device=base.weight.device)
        self.lora_a = nn.Parameter(torch.empty(rank, self.in_features, **kind))  # (r, in)
        self.lora_b = nn.Parameter(torch.zeros(self.out_features, rank, **kind))  # (out, r)
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.dropout = nn.Dropout(dropout)
        self.merged = False

    def low_rank(self, x: torch.Tensor) -> torch.Tensor:
        """(alpha / rank) B A x: (…, in) -> (…, out)."""
        return self.scale * F.linear(F.linear(x, self.lora_a), self.lora_b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)  # (…, out)
        if not self.merged and not self.disabled:
            return y + self.low_rank(self.dropout(x))
        if self.merged and self.disabled:  # the update is folded into weight: take it back out
            return y - self.low_rank(x)
        return y

    def delta_weight(self) -> torch.Tensor:
        """The update as a matrix, (alpha / rank) B A: (out, in)."""
        return self.scale * (self.lora_b.float() @ self.lora_a.float())

    @torch.no_grad()
    def merge(self) -> None:
        """Fold the update into `weight` (forward then costs one matmul); a no-op if already merged."""
        if not self.merged:
            self.weight += self.delta_weight().to(self.weight.dtype)
            self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take the update back out of `weight` (e.g. to train on); a no-op if not merged."""
        if self.merged:
            self.weight -= self.delta_weight().to(self.weight.dtype)
            self.merged = False

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, rank={self.rank}, scale={self.scale:g}"


DEFAULT_TARGETS = ("qkv", "out")


def apply_lora(model: nn.Module, rank: int = 8, alpha: float = 16.0, dropout: float = 0.0,
               targets: tuple[str, ...] | list[str] = DEFAULT_TARGETS) -> nn.Module:
    """Replace every nn.Linear whose dotted name matches one of `targets` by a LoRALinear; freeze
    everything else. Returns `model` (changed in place).

    A pattern matches a whole name or its trailing part, with * wildcards: "qkv" matches every
    "blocks.<i>.attention.qkv", "blocks.0.*" every linear layer of block 0, "blocks.*" all of them.
    """
    if rank < 1:
        raise LmlabError(f"LoRA rank={rank} must be at least 1")
    if not 0.0 <= dropout < 1.0:
        raise LmlabError(f"LoRA dropout={dropout} must be in [0, 1)")
    if isinstance(targets, str):
        targets = (targets,)
    if not targets:
        raise LmlabError(f"no LoRA targets given; name some linear layers, e.g. {', '.join(DEFAULT_TARGETS)}")
    linear = linear_layers(model)
    chosen = set()
    for pattern in targets:
        matched = [name for name in linear if _matches(name, pattern)]
        if not matched:
            examples = [n for n in linear if not n.startswith("blocks.") or n.startswith("blocks.0.")]
            raise LmlabError(f"LoRA target '{pattern}' matches no linear layer; valid names include "
                             f"{', '.join(examples)} (a pattern matches a dotted name or its end, * is a wildcard)")
        chosen.update(matched)
    for name in sorted(chosen):
        model.set_submodule(name, LoRALinear(model.get_submodule(name), rank, alpha, dropout))
    freeze_base(model)
    return model


def linear_layers(model: nn.Module) -> list[str]:
    """Dotted names of the nn.Linear layers LoRA may target: the model's own, not ones PEFT added."""
    added = added_module_names(model)
    return [name for name, m in model.named_modules() if type(m) is nn.Linear
            and not any(name == a or name.startswith(a + ".") for a in added)]


def _matches(name: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, "*." + pattern)


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every LoRA update into its base weight (inference at base-model speed). Refuses a layer
    whose weight is tied to another (a tied LM head: merging would change the embedding too)."""
    names = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, LoRALinear)]
    for name, layer in layers:
        others = [n for n in names[id(layer.weight)] if n != f"{name}.weight"]
        if others:
            raise LmlabError(f"cannot merge LoRA into {name}: its weight is tied to {others[0]}, which merging "
                             "would change too; leave it unmerged or do not target it")
    for _, layer in layers:
        layer.merge()
    return model


def unmerge_lora(model: nn.Module) -> nn.Module:
    """Undo `merge_lora`: every LoRA update leaves its base weight again."""
    for module in peft_modules(model):
        if isinstance(module, LoRALinear):
            module.unmerge()
    return model
