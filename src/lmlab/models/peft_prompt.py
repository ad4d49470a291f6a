"""Prompt and prefix tuning in PEFT's layout: lmlab's virtual-token embeddings as peft's PROMPT_TUNING
`prompt_embeddings` (n, d_model), lmlab's prefix keys and values as PREFIX_TUNING's (P, L * 2 * H_kv * D),
and back.

peft puts the virtual tokens in front of the input embeddings, so the text sits at positions
n..; lmlab runs them in a pass of their own and rotates their keys back by n (modules/peft/prompt.py),
which is the same computation only where positions enter through RoPE alone. With learned
positions (GPT-2) the text keeps positions 0.. in lmlab, and with a scaled embedding (Gemma) or
local RoPE or sliding windows the passes differ: those stay in lmlab's own layout.

Prefix tuning is the same story: peft hands the P prefix keys and values to the model as a KV cache,
so the text again sits at positions P..; lmlab keeps it at 0.. and its prefix keys are peft's rotated
back by P, which with RoPE alone gives every score peft's does (q_t . R(-P) k = R(P + t) q . k).
"""

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.modules.peft.prefix import PrefixAttention, apply_prefix
from lmlab.modules.peft.prompt import apply_prompt_tuning
from lmlab.modules.positions import apply_rotary

KEY = "prompt_embeddings"


def prompt_problem(model: nn.Module) -> str | None:
    """Why lmlab's prompt tuning of `model` is not peft's PROMPT_TUNING, or None when it is."""
    if model.embedding_scale != 1.0:
        return f"the {model.config.family} family scales its embeddings, which lmlab's prompt pass leaves out"
    return prefix_problem(model)


def prefix_problem(model: nn.Module) -> str | None:
    """Why lmlab's prefix (or virtual tokens) on `model` is not peft's, or None when it is the same computation."""
    if model.positions is not None or model.rotary is None:
        return "with learned positions lmlab leaves the text at positions 0.., peft moves it behind the virtual tokens"
    if model.config.rope_scaling == "yarn":
        return "YaRN scales its rotations, so lmlab cannot rotate the virtual tokens' keys back exactly"
    if model.local_rotary is not None or any(w is not None for w in model.windows):
        return (f"the {model.config.family} family has local RoPE or sliding windows, which lmlab's virtual "
                "tokens are not held to")
    return None


def prompt_to_peft(model: nn.Module, base_name: str | None) -> tuple[dict, dict[str, torch.Tensor]]:
    """(adapter_config.json, adapter_model.safetensors' tensors) of `model`'s virtual tokens."""
    embeddings = model.prompt_tuning.embeddings.detach().cpu().clone()  # (n, C)
    cfg = model.config
    config = {"peft_type": "PROMPT_TUNING", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_name,
              "num_virtual_tokens": embeddings.shape[0], "token_dim": cfg.d_model, "num_transformer_submodules": 1,
              "num_attention_heads": cfg.n_heads, "num_layers": cfg.n_layers, "prompt_tuning_init": "RANDOM",
              "inference_mode": True}
    return config, {KEY: embeddings}


def prompt_from_peft(model: nn.Module, config: dict, tensors: dict[str, torch.Tensor], source: str) -> nn.Module:
    """Apply to `model` the virtual tokens of peft's PROMPT_TUNING `config` and `tensors` (read from `source`)."""
    problem = prompt_problem(model)
    if problem:
        raise LmlabError(f"adapter in {source} is peft prompt tuning, which lmlab cannot compute exactly here: "
                         f"{problem}; use it with peft, or prompt-tune with lmlab")
    n, d = config.get("num_virtual_tokens"), model.config.d_model
    embeddings = tensors.get(KEY)
    if set(tensors) != {KEY} or embeddings is None or embeddings.shape != (n, d) or config.get(
            "num_transformer_submodules", 1) != 1 or not embeddings.is_floating_point():
        have = {k: tuple(t.shape) for k, t in tensors.items()}
        raise LmlabError(f"adapter in {source} holds {have} with num_virtual_tokens={n!r}; this base model needs "
                         f"{KEY} of shape (num_virtual_tokens, {d}); load it onto the model it was trained for")
    apply_prompt_tuning(model, n)
    with torch.no_grad():
        model.prompt_tuning.embeddings.copy_(embeddings)
    return model


def rotated(model: nn.Module, keys: torch.Tensor, by: int) -> torch.Tensor:
    """keys (H_kv, P, D) rotated by `by` positions (negative: back)."""
    n = abs(by)
    sign = 1 if by >= 0 else -1
    cos, sin = model.rotary.cos[n], model.rotary.sin[n]  # (D,)
    return apply_rotary(keys.to(cos.device, cos.dtype)[None], (cos, sign * sin))[0]


def prefix_to_peft(model: nn.Module, base_name: str | None) -> tuple[dict, dict[str, torch.Tensor]]:
    """(adapter_config.json, adapter_model.safetensors' tensors) of `model`'s prefix keys and values."""
    layers = [m for m in model.blocks.modules() if isinstance(m, PrefixAttention)]  # one per block, in order
    heads, P, D = layers[0].prefix_k.shape
    pairs = [torch.stack([rotated(model, m.prefix_k.detach(), P),
                          m.prefix_v.detach()]) for m in layers]  # each (2, H_kv, P, D)
    weight = torch.stack(pairs).permute(3, 0, 1, 2, 4).reshape(P, -1)  # (P, L * 2 * H_kv * D)
    config = {"peft_type": "PREFIX_TUNING", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_name,
              "num_virtual_tokens": P, "token_dim": heads * D, "num_attention_heads": heads,
              "num_layers": len(layers), "num_transformer_submodules": 1, "encoder_hidden_size": model.config.d_model,
              "prefix_projection": False, "inference_mode": True}
    return config, {KEY: weight.cpu().contiguous()}


def prefix_from_peft(model: nn.Module, config: dict, tensors: dict[str, torch.Tensor], source: str) -> nn.Module:
    """Apply to `model` the prefix of peft's PREFIX_TUNING `config` and `tensors` (read from `source`)."""
    problem = prefix_problem(model)
    if problem:
        raise LmlabError(f"adapter in {source} is peft prefix tuning, which lmlab cannot compute exactly here: "
                         f"{problem}; use it with peft, or prefix-tune with lmlab")
    cfg = model.config
    heads, P, L = cfg.n_kv_heads or cfg.n_heads, config.get("num_virtual_tokens"), cfg.n_layers
    weight = tensors.get(KEY)
    width = L * 2 * heads * cfg.head_dim
    if set(tensors) != {KEY} or weight is None or not isinstance(P, int) or weight.shape != (P, width) \
            or config.get("prefix_projection") or not weight.is_floating_point():
        have = {k: tuple(t.shape) for k, t in tensors.items()}
        raise LmlabError(f"adapter in {source} holds {have} with num_virtual_tokens={P!r}; this base model needs "
                         f"{KEY} of shape (num_virtual_tokens, {width}) without prefix_projection; load it onto "
                         "the model it was trained for")
    apply_prefix(model, P)
    pairs = weight.float().reshape(P, L, 2, heads, cfg.head_dim).permute(1, 2, 3, 0, 4)  # (L, 2, H_kv, P, D)
    layers = [m for m in model.blocks.modules() if isinstance(m, PrefixAttention)]
    with torch.no_grad():
        for layer, (keys, values) in zip(layers, pairs):
            layer.prefix_k.copy_(rotated(model, keys, -P))
            layer.prefix_v.copy_(values)
    return model
