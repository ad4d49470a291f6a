"""Renaming the per-layer tensors of a checkpoint between HF names and ours, for any family.

A family's converter lists, for one layer, which of our tensors is which HF tensor (`layer`),
and which of ours is several HF tensors stacked along dim 0 (`stacked`: our fused qkv is HF's
separate q, k and v; Llama's gate_up is gate and up). These two functions apply those tables to
every layer, in each direction.
"""

import torch


def layers_from_hf(hf_state: dict[str, torch.Tensor], hf_prefix: str, n_layers: int, layer: dict[str, str],
                   stacked: dict[str, tuple[str, ...]]) -> dict[str, torch.Tensor]:
    """Our `blocks.{i}.*` tensors from HF ones named `hf_prefix.format(i=i) + name`."""
    ours = {}
    for i in range(n_layers):
        prefix = hf_prefix.format(i=i)
        for name, hf_name in layer.items():
            ours[f"blocks.{i}.{name}"] = hf_state[prefix + hf_name]
        for name, hf_names in stacked.items():
            ours[f"blocks.{i}.{name}"] = torch.cat([hf_state[prefix + n] for n in hf_names], dim=0)
    return ours


def layers_to_hf(state: dict[str, torch.Tensor], hf_prefix: str, n_layers: int, layer: dict[str, str],
                 stacked: dict[str, tuple[str, ...]], sizes: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """HF tensors from our `blocks.{i}.*` ones; a stacked tensor is split into `sizes[name]` rows."""
    hf = {}
    for i in range(n_layers):
        prefix = hf_prefix.format(i=i)
        for name, hf_name in layer.items():
            hf[prefix + hf_name] = state[f"blocks.{i}.{name}"]
        for name, hf_names in stacked.items():
            for hf_name, part in zip(hf_names, state[f"blocks.{i}.{name}"].split(sizes[name], dim=0)):
                hf[prefix + hf_name] = part
    return hf
