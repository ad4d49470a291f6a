"""LoRA in PEFT's layout: lmlab's LoRA layers as HF peft's `adapter_config.json` settings and
`adapter_model.safetensors` tensors, and back.

PEFT adapts HF's modules: q, k and v apart where lmlab fuses them (`peft_names.hf_parts`). One
rank-r update B A of our fused layer is exactly PEFT's q, k and v each with that A and their
rows of B, so saving repeats A. Reading, PEFT's parts of one of our layers become one update:
parts that share A (what lmlab wrote) are stacked back into rank r; parts with their own A are
stacked block-diagonally, rank r_q + r_k + r_v, a missing part's rows zero, and each part's
scale folded into its rows of B. Both give the same outputs as PEFT, to rounding.
"""

import re
from collections import Counter

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.models.peft_names import HFPart, hf_parts, short_targets
from lmlab.modules.peft.lora import LoRALinear, apply_lora, linear_layers

PREFIX = "base_model.model."  # PEFT's key of an HF module: PREFIX + module + ".lora_A.weight"
_PLAIN = re.compile(r"[\w.]+")  # a rank/alpha pattern lmlab evaluates: a plain dotted name


def lora_to_peft(model: nn.Module, base_name: str | None) -> tuple[dict, dict[str, torch.Tensor]]:
    """(adapter_config.json, adapter_model.safetensors' tensors) of `model`'s LoRA layers."""
    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    parts = hf_parts(model, list(layers))
    tensors, ranks, alphas, dropouts = {}, {}, {}, set()
    for name, layer in layers.items():
        if not parts[name]:
            raise LmlabError(f"LoRA on {name} has no module PEFT can adapt in the Hugging Face model; "
                             "drop it from --lora-targets to save the adapter in PEFT's format")
        for part in parts[name]:
            key = PREFIX + part.module
            tensors[key + ".lora_A.weight"] = layer.lora_a.detach().cpu().clone()  # (r, in)
            tensors[key + ".lora_B.weight"] = layer.lora_b.detach()[part.rows].cpu().clone()  # (out_part, r)
            ranks[part.module], alphas[part.module] = layer.rank, layer.scale * layer.rank
        dropouts.add(layer.dropout.p)
    r, alpha = Counter(ranks.values()).most_common(1)[0][0], Counter(alphas.values()).most_common(1)[0][0]
    every = {part.module for ps in hf_parts(model, linear_layers(model) + list(layers)).values() for part in ps}
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_name,
        "r": r, "lora_alpha": alpha, "lora_dropout": max(dropouts),
        "target_modules": short_targets(set(ranks), every), "bias": "none", "modules_to_save": None,
        "fan_in_fan_out": any(p.conv1d for ps in parts.values() for p in ps),
        "rank_pattern": {m: v for m, v in ranks.items() if v != r},
        "alpha_pattern": {m: v for m, v in alphas.items() if v != alpha},
        "use_rslora": False, "use_dora": False, "init_lora_weights": True, "inference_mode": True,
        "layers_to_transform": None, "layers_pattern": None,
    }
    return config, tensors


def lora_from_peft(model: nn.Module, config: dict, tensors: dict[str, torch.Tensor], source: str) -> nn.Module:
    """Apply to `model` the LoRA of PEFT's `config` and `tensors` (read from `source`), refusing in
    one line what lmlab's LoRA cannot compute or what does not fit this base model."""
    check_lora_config(config, source)
    layers = linear_layers(model)
    parts = hf_parts(model, layers)
    owner = {part.module: (name, part) for name in layers for part in parts[name]}
    check_targets(config, set(owner), source)
    found: dict[str, dict[str, HFPart]] = {}
    for key in tensors:
        module = key.removeprefix(PREFIX).removesuffix(".lora_A.weight").removesuffix(".lora_B.weight")
        if not key.startswith(PREFIX) or module == key.removeprefix(PREFIX) or module not in owner:
            raise LmlabError(f"adapter in {source} holds {key}, which is no LoRA weight of a linear layer of this "
                             f"base model ({config.get('base_model_name_or_path') or 'its base is not named'}); "
                             "load it onto the model it was trained for")
        name, part = owner[module]
        found.setdefault(name, {})[module] = part
    dropout = float(config.get("lora_dropout") or 0.0)
    for name, modules in found.items():
        a, b, scale = merged_update(model.get_submodule(name).weight.shape, modules, config, tensors, source)
        apply_lora(model, a.shape[0], scale * a.shape[0], dropout, targets=[name])
        layer = model.get_submodule(name)
        with torch.no_grad():
            layer.lora_a.copy_(a)
            layer.lora_b.copy_(b)
    return model


def merged_update(shape: torch.Size, modules: dict[str, HFPart], config: dict, tensors: dict[str, torch.Tensor],
                  source: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(A (R, in), B (out, R), scale) of our layer of weight `shape` (out, in) from PEFT's parts of it."""
    ups = []
    for module, part in modules.items():
        a, b = (tensors.get(f"{PREFIX}{module}.lora_{x}.weight") for x in "AB")
        r = pattern_value(config.get("rank_pattern"), module, config["r"], source)
        if a is None or b is None or a.shape != (r, shape[1]) or b.shape != (len(part.rows), r) \
                or not (a.is_floating_point() and b.is_floating_point()):
            have = [tuple(t.shape) if t is not None else None for t in (a, b)]
            raise LmlabError(f"adapter in {source}: {module}'s lora_A/lora_B are {have[0]}/{have[1]}, this base "
                             f"model needs {(r, shape[1])}/{(len(part.rows), r)}; load it onto the model it was "
                             "trained for")
        alpha = pattern_value(config.get("alpha_pattern"), module, config["lora_alpha"], source)
        ups.append((a.float(), b.float(), alpha / (r ** 0.5 if config.get("use_rslora") else r), part.rows))
    a0, _, scale, _ = ups[0]
    if len(ups) > 1 and all(torch.equal(a, a0) and s == scale for a, _, s, _ in ups):  # one update, rows split
        b = torch.zeros(shape[0], a0.shape[0])
        for _, b_part, _, rows in ups:
            b[rows] = b_part
        return a0, b, scale
    a = torch.cat([a for a, _, _, _ in ups])  # (R, in)
    b, start = torch.zeros(shape[0], a.shape[0]), 0
    for a_part, b_part, s, rows in ups:  # block-diagonal: part j's rows use only its own r_j columns
        b[rows, start:start + a_part.shape[0]] = b_part * (s / scale)
        start += a_part.shape[0]
    return a, b, scale


def check_lora_config(config: dict, source: str) -> None:
    """Refuse settings lmlab's LoRA does not compute (trained biases, whole modules saved, DoRA) or
    that are not what PEFT writes."""
    fix = "load it onto the model it was trained for, with lmlab's LoRA settings"
    r, alpha = config.get("r"), config.get("lora_alpha")
    if not isinstance(r, int) or isinstance(r, bool) or r < 1 or not isinstance(alpha, int | float):
        raise LmlabError(f"adapter in {source}: adapter_config.json needs an integer r >= 1 and a number "
                         f"lora_alpha, not r={r!r}, lora_alpha={alpha!r}; re-save it with peft")
    unsupported = {"bias": config.get("bias", "none") not in ("none", None),
                   "modules_to_save": bool(config.get("modules_to_save")), "use_dora": bool(config.get("use_dora")),
                   "trainable_token_indices": bool(config.get("trainable_token_indices"))}
    names = [k for k, bad in unsupported.items() if bad]
    if names:
        raise LmlabError(f"adapter in {source} sets {', '.join(f'{k}={config[k]!r}' for k in names)}, which "
                         f"lmlab's LoRA does not train; save it from peft without them (bias='none'), or {fix}")
    dropout = config.get("lora_dropout") or 0.0
    if not isinstance(dropout, int | float) or not 0.0 <= dropout < 1.0:
        raise LmlabError(f"adapter in {source}: lora_dropout={dropout!r} must be in [0, 1); fix adapter_config.json")


def check_targets(config: dict, modules: set[str], source: str) -> None:
    """Each name of a `target_modules` list names a module of this base (PEFT's rule: the whole name
    or its end after a dot); a regular expression is left to the tensors' own check."""
    targets = config.get("target_modules")
    if not isinstance(targets, list):
        return
    missing = [t for t in targets if not isinstance(t, str)
               or not any(m == t or m.endswith("." + t) for m in modules)]
    if missing:
        raise LmlabError(f"adapter in {source} targets {missing[0]!r}, which is no linear layer of this base model "
                         f"(its modules end in {', '.join(sorted({m.rsplit('.', 1)[-1] for m in modules}))}); "
                         "load it onto the model it was trained for")


def pattern_value(patterns, module: str, default, source: str):
    """PEFT's rank_pattern / alpha_pattern lookup: the value of the first key that is `module` or
    its end after a dot; a key lmlab would have to run as a regular expression is refused."""
    for key, value in (patterns or {}).items():
        if not _PLAIN.fullmatch(key) or not isinstance(value, int | float):
            raise LmlabError(f"adapter in {source}: pattern {key!r}: {value!r} is not a module name and a number; "
                             "lmlab reads plain module names in rank_pattern and alpha_pattern")
        if re.fullmatch(rf"(.*\.)?({key})", module):
            return value
    return default
