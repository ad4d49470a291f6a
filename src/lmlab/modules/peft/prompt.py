"""Prompt tuning (Lester et al., 2021): n trained "virtual token" embeddings in front of the input.

Attention is causal, so the virtual tokens never see the text: their keys and values in every
layer depend only on their embeddings and the frozen weights. So instead of lengthening every
input, each forward pass first runs the virtual tokens through the network alone (a "prompt
pass" that fills a KV cache, as generation prefills a prompt) and then runs the text with every
layer also attending to those keys and values (prefix.py's mechanism). The outputs have the
input's shape, padding and KV-cache decoding work unchanged, and the text keeps its positions.

The virtual tokens take positions 0..n-1 in their pass. With RoPE their keys are then rotated
back by n, which puts them at -n..-1 relative to the text: exactly a literal concatenation.
With added position vectors (GPT-2) the text keeps positions 0.. rather than n.. (the virtual
tokens' own position vectors are simply part of what is trained).

The prompt pass is started by a forward pre-hook on the token embedding, which every pass
(`forward`, `hidden_states`, generation) calls first. It costs n tokens through the network once
per pass, batch 1.
"""

from functools import partial

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.modules.kv_cache import KVCache, LayerKV
from lmlab.modules.peft.core import PeftModule, freeze_base
from lmlab.modules.peft.prefix import attend_with_prefix
from lmlab.modules.positions import apply_rotary


class PromptTuning(PeftModule):
    """The trained virtual-token embeddings (n_tokens, d_model)."""

    adds = ("embeddings",)

    def __init__(self, embeddings: torch.Tensor):
        super().__init__()
        self.embeddings = nn.Parameter(embeddings)  # (n, C)


class PromptAttention(PeftModule):
    """A layer's self-attention (frozen) that also attends to the virtual tokens' keys/values,
    which the prompt pass hands it in `handoff` before each pass and it uses once. `handoff` is a list that
    a shallow copy of the layer shares (a decoding view's, `generation/layout.py`), so the copy gets them too."""

    def __init__(self, base: nn.Module):
        super().__init__()
        self.base = base
        self.handoff: list[tuple[torch.Tensor, torch.Tensor] | None] = [None]  # [keys, values (H_kv, n, D)]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rope=None,
                kv_cache: LayerKV | None = None) -> torch.Tensor:
        keys_values, self.handoff[0] = self.handoff[0], None  # used once: no graph outlives its pass
        if keys_values is None or self.disabled:
            return self.base(x, mask, rope, kv_cache)
        return attend_with_prefix(self.base, x, mask, rope, kv_cache, *keys_values)


def apply_prompt_tuning(model: nn.Module, n_tokens: int = 20, init_from_vocab: bool = True) -> nn.Module:
    """Prepend `n_tokens` trained embeddings to every input; freeze everything else. They start as
    the embeddings of random vocabulary tokens (`init_from_vocab`, the paper's better start) or
    as random vectors of the embeddings' scale. Returns `model` (changed in place)."""
    cfg = model.config
    if not 1 <= n_tokens < cfg.context_length:
        raise LmlabError(f"--n-prompt-tokens {n_tokens} must be between 1 and the context length "
                         f"({cfg.context_length}) - 1")
    if hasattr(model, "prompt_tuning"):
        raise LmlabError("this model is already prompt-tuned; apply prompt tuning to a fresh base model")
    table = model.token_embedding.weight.detach()  # (V, C)
    if init_from_vocab:
        embeddings = table[torch.randint(cfg.vocab_size, (n_tokens,), device=table.device)].clone()
    else:
        embeddings = torch.randn(n_tokens, cfg.d_model, dtype=table.dtype, device=table.device) * table.std()
    model.prompt_tuning = PromptTuning(embeddings)
    for block in model.blocks:
        block.attention = PromptAttention(block.attention)
    model.token_embedding.register_forward_pre_hook(partial(_prompt_pass, model))
    freeze_base(model)
    return model


def _prompt_pass(model: nn.Module, _embedding: nn.Module, _args) -> None:
    """Run the virtual tokens through the network and hand each layer their keys and values."""
    layers = [m for m in model.blocks.modules() if isinstance(m, PromptAttention)]  # one per block, in order
    for layer in layers:
        layer.handoff[0] = None  # the prompt pass itself runs without a prompt
    prompt = model.prompt_tuning
    if prompt.disabled:
        return
    n, cfg = prompt.embeddings.size(0), model.config
    positions = torch.arange(n, device=prompt.embeddings.device)
    x = prompt.embeddings[None]  # (1, n, C)
    if model.positions is not None:
        x = x + model.positions(positions)
    x = model.dropout(x)
    rope = model.rotary(positions) if model.rotary is not None else None
    cache = KVCache(len(layers), 1, cfg.n_kv_heads or cfg.n_heads, cfg.head_dim, n, x.dtype, x.device)
    for i, block in enumerate(model.blocks):
        x = block(x, None, rope, cache.layer(i))
    for i, layer in enumerate(layers):
        k, v = cache.k[i], cache.v[i]  # (1, H_kv, n, D)
        if rope is not None:  # rotate by -n: positions 0..n-1 become -n..-1, just before the text
            k = apply_rotary(k, (model.rotary.cos[n], -model.rotary.sin[n]))
        layer.handoff[0] = (k[0], v[0])
