"""Autoregressive decoding with a KV cache: prefill the prompt once, then one token per step."""

from collections.abc import Iterator

import torch

from lmlab.errors import LmlabError
from lmlab.generation.sampling import next_token
from lmlab.modules.kv_cache import KVCache


@torch.no_grad()
def stream_tokens(model: torch.nn.Module, prompt_ids: list[int], max_new_tokens: int, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                  eos_id: int | None = None) -> Iterator[int]:
    """Yield new token ids one at a time (stops at eos, which is not yielded, or after max_new_tokens)."""
    cfg = model.config
    if not prompt_ids:
        raise LmlabError("the prompt is empty; pass some text (or --add-bos)")
    if len(prompt_ids) + max_new_tokens > cfg.context_length:
        raise LmlabError(f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                         f"model's context of {cfg.context_length} tokens; shorten the prompt or ask for fewer tokens")
    device = next(model.parameters()).device
    generator = torch.Generator(device).manual_seed(seed) if seed is not None else None
    cache = KVCache(cfg.n_layers, 1, cfg.n_kv_heads or cfg.n_heads, cfg.head_dim,
                    len(prompt_ids) + max_new_tokens, next(model.parameters()).dtype, device)
    logits = model(torch.tensor([prompt_ids], device=device), kv_cache=cache)[:, -1]  # (1, V)
    for _ in range(max_new_tokens):
        token = next_token(logits, temperature, top_k, top_p, generator)  # (1,)
        if token.item() == eos_id:
            return
        yield token.item()
        logits = model(token[:, None], kv_cache=cache)[:, -1]


def generate(model: torch.nn.Module, prompt_ids: list[int], max_new_tokens: int, **sampling) -> list[int]:
    """The new token ids after `prompt_ids` (see `stream_tokens` for the sampling arguments)."""
    return list(stream_tokens(model, prompt_ids, max_new_tokens, **sampling))
