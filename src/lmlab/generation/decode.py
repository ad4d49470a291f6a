"""The decoding loop for greedy and sampling: prefill the prompts once, then one token per step.

Each step feeds only the newest token; the KV cache holds the keys and values of everything
before it, so a step costs O(length) instead of re-running the whole sequence (O(length^2)).
A step is mostly matrix-vector products that stream the weights from memory; it runs under
inference mode (no autograd bookkeeping), through the model's `decoding_view` (`layout.py`),
which streams the weights about twice as fast on the CPU.
"""

from collections.abc import Iterator

import torch

from lmlab.generation.batch import check_prompts, is_padded, left_pad, new_cache, seen_tokens
from lmlab.generation.config import GenerationConfig
from lmlab.generation.layout import decoding_view
from lmlab.generation.sampling import apply_repetition_penalty, next_token
from lmlab.modules.kv_cache import KVCache


@torch.inference_mode()
def decode_steps(model: torch.nn.Module, prompts: list[list[int]], config: GenerationConfig) -> Iterator[torch.Tensor]:
    """Yield the next token of every prompt, (B,), once per step.

    Stops after max_new_tokens or once every row has produced one of config.stop_ids. A row that
    has stopped keeps getting (meaningless) tokens while others run; callers cut each row at its
    first stop. Rows never influence each other, so a batch gives the tokens each prompt gets alone.
    """
    check_prompts(model, prompts, config.max_new_tokens)
    device = next(model.parameters()).device
    N = config.max_new_tokens
    ids, mask = left_pad(prompts, N, device)  # (B, T), (B, T + N)
    B, T = ids.shape
    cache = new_cache(model, B, T + N)
    generator = torch.Generator(device).manual_seed(config.seed) if config.seed is not None else None
    stop_ids = torch.tensor(config.stop_ids, dtype=torch.long, device=device)
    stopped = torch.zeros(B, dtype=torch.bool, device=device)

    padded = is_padded(mask)  # if not, pass no mask: the causal default is exact and faster
    logits = last_logits(model, ids, mask[:, :T] if padded else None, cache)  # (B, V)
    penalize = config.repetition_penalty != 1.0
    seen = seen_tokens(ids, mask[:, :T], logits.size(-1)) if penalize else None
    step_model = decoding_view(model)
    for step in range(N):
        if penalize:
            logits = apply_repetition_penalty(logits, seen, config.repetition_penalty)
        token = next_token(logits, config.temperature, config.top_k, config.top_p, generator)  # (B,)
        yield token
        stopped |= torch.isin(token, stop_ids)
        if step == N - 1 or bool(stopped.all()):
            return
        if penalize:
            seen[torch.arange(B, device=device), token] = True
        logits = last_logits(step_model, token[:, None], mask[:, :T + step + 1] if padded else None, cache)


def last_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache) -> torch.Tensor:
    """Run ids (B, T) through the model, filling `cache`; the logits (B, V) of the last position only
    (the LM head on one position instead of T: a long prompt with a big vocabulary costs much less)."""
    hidden = model.hidden_states(ids, mask, kv_cache=cache)  # (B, T, C)
    return model.lm_head(hidden[:, -1]).float()  # (B, V)
