"""Where lmlab's linear layers sit in a family's Hugging Face model: the HF modules PEFT adapts.

lmlab fuses q/k/v into one layer (and Llama's gate/up into another); HF keeps them apart, and
GPT-2 fuses c_attn as we do but stores its Conv1D weights transposed. Rather than a second table
of names beside the converters', the family's own `to_hf` is run on the model's state dict with
each linear weight replaced by a probe: a column of its row numbers, (out, 1). Every HF tensor
that comes back as a view of a probe is an HF module, and its values are the rows of our layer
that module computes, in HF's order; a probe that comes back as a row, (1, out), was transposed
(a Conv1D: PEFT's `fan_in_fan_out`).
"""

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.models.registry import lookup


@dataclass(frozen=True)
class HFPart:
    """One HF module that computes some rows of one of our linear layers."""

    module: str  # the HF module's name in the transformers model, e.g. "model.layers.0.self_attn.q_proj"
    rows: torch.Tensor  # (out_part,) int64: the rows of our layer's output it computes, in HF's order
    conv1d: bool  # HF stores its weight (in, out), GPT-2's Conv1D


def hf_parts(model: nn.Module, layers: list[str]) -> dict[str, list[HFPart]]:
    """Our linear layer name -> the HF modules it is, for each of `layers` (dotted names of linear
    layers, or of LoRA layers, which keep their base's names). A layer with no HF module gets []."""
    cfg = model.config
    family = lookup(cfg.family, kind="decoder")
    if family.convert is None:
        raise LmlabError(f"the {cfg.family} family has no Hugging Face form, so PEFT has no module names for "
                         "its layers; save the adapter in lmlab's own format")
    state = dict(model.state_dict())
    probes = {}
    for name in layers:
        out = model.get_submodule(name).weight.shape[0]
        probe = torch.arange(out, dtype=torch.float64)[:, None]  # (out, 1): row i holds i
        state[f"{name}.weight"] = probe
        probes[probe.untyped_storage().data_ptr()] = name
    untied = dataclasses.replace(cfg, tie_embeddings=False)  # HF has an lm_head module even when it is tied
    parts: dict[str, list[HFPart]] = {name: [] for name in layers}
    for hf_name, tensor in family.convert.to_hf(state, untied).items():
        name = probes.get(tensor.untyped_storage().data_ptr()) if isinstance(tensor, torch.Tensor) else None
        if name is None or tensor.dim() != 2:
            continue
        conv1d = tensor.shape[0] == 1 and tensor.shape[1] > 1
        rows = (tensor[0] if conv1d else tensor[:, 0]).long()
        parts[name].append(HFPart(hf_name.removesuffix(".weight"), rows, conv1d))
    return parts


def short_targets(targeted: set[str], every: set[str]) -> list[str]:
    """PEFT's `target_modules` for the HF modules `targeted` out of all of them (`every`): for each, the
    shortest dotted suffix that PEFT's rule (a name equal to the entry or ending in "." + entry)
    matches in `targeted` only ("q_proj" when every layer's q_proj is adapted, "h.0.attn.c_attn" when one is)."""
    names = set()
    for module in sorted(targeted):
        parts = module.split(".")
        for start in range(len(parts) - 1, -1, -1):
            suffix = ".".join(parts[start:])
            if parts[start].isdigit():  # "layers.1.q_proj", not "1.q_proj"
                continue
            if all(m in targeted for m in every if m == suffix or m.endswith("." + suffix)):
                names.add(suffix)
                break
    return sorted(names)
