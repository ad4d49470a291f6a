"""Prompt tuning in PEFT's layout: lmlab's virtual-token embeddings as peft's PROMPT_TUNING
`prompt_embeddings` (n, d_model), and back.

peft puts the virtual tokens in front of the input embeddings, so the text sits at positions
n..; lmlab runs them in a pass of their own and rotates their keys back by n (modules/peft/prompt.py),
which is the same computation only where positions enter through RoPE alone. With learned
positions (GPT-2) the text keeps positions 0.. in lmlab, and with a scaled embedding (Gemma) or
local RoPE or sliding windows the passes differ: those stay in lmlab's own layout.
"""

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.modules.peft.prompt import apply_prompt_tuning

KEY = "prompt_embeddings"


def prompt_problem(model: nn.Module) -> str | None:
    """Why lmlab's prompt tuning of `model` is not peft's PROMPT_TUNING, or None when it is."""
    if model.positions is not None or model.rotary is None:
        return "with learned positions lmlab's virtual tokens leave the text at positions 0.., peft's move it to n.."
    if model.embedding_scale != 1.0 or model.local_rotary is not None or any(w is not None for w in model.windows):
        return (f"the {model.config.family} family scales its embeddings, has local RoPE or sliding windows, "
                "which lmlab's prompt pass leaves out")
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
