"""Putting prompts of different lengths into one batch: left padding, the mask, the cache.

Prompts are right-aligned (padding on the left) so that every row's next token lands in the same
column; the attention mask hides the padding and the model counts positions from each row's first
real token, so a padded row computes what it would alone. Without padding no mask is passed at
all: the prefill is a plain causal pass and each step's token sees every cached key, the fast paths.
"""

import torch

from lmlab.errors import LmlabError
from lmlab.modules.kv_cache import KVCache


def check_prompts(model: torch.nn.Module, prompts: list[list[int]], max_new_tokens: int) -> None:
    """Raise a one-line error for an empty prompt or one that leaves no room for max_new_tokens."""
    if not prompts:
        raise LmlabError("no prompts given; pass at least one list of token ids")
    check_token_ids(model, prompts)
    context = model.config.context_length
    for i, prompt in enumerate(prompts):
        where = f"prompt {i} " if len(prompts) > 1 else "the prompt "
        if not prompt:
            raise LmlabError(f"{where}is empty; pass some text (or --add-bos)")
        if len(prompt) + max_new_tokens > context:
            asked = f" + max_new_tokens ({max_new_tokens})" if max_new_tokens else ""
            raise LmlabError(f"{where}({len(prompt)} tokens){asked} exceeds the model's context of {context} "
                             f"tokens; shorten the prompt{' or ask for fewer tokens' if asked else ''}")


def check_token_ids(model: torch.nn.Module, prompts: list[list[int]]) -> None:
    """Raise a one-line error for a token id the model has no embedding for (a tokenizer that does not
    fit the model), instead of an IndexError deep inside it."""
    vocab_size = model.config.vocab_size
    for i, prompt in enumerate(prompts):
        if prompt and not 0 <= min(prompt) <= max(prompt) < vocab_size:
            bad = min(prompt) if min(prompt) < 0 else max(prompt)
            where = f"prompt {i}" if len(prompts) > 1 else "the prompt"
            raise LmlabError(f"{where} has token id {bad}, outside the model's vocabulary of {vocab_size} tokens; "
                             "the tokenizer does not fit this model: use the model's own tokenizer")


def left_pad(prompts: list[list[int]], max_new_tokens: int, device: torch.device, pad_id: int = 0
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (B, T) with each prompt right-aligned, and the attention mask (B, T + max_new_tokens):
    1 for real tokens, including the ones still to be generated, 0 for padding."""
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    mask = torch.ones((len(prompts), T + max_new_tokens), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, T - len(prompt):] = torch.tensor(prompt)
        mask[row, :T - len(prompt)] = 0
    return ids.to(device), mask.to(device)


def is_padded(mask: torch.Tensor) -> bool:
    """Whether any row of the batch is left-padded (only then does the model need the mask)."""
    return not bool(mask.all())


def sliding_window(model: torch.nn.Module) -> int | None:
    """The window every layer of `model` attends over, or None when some layer sees every key (or none has one)."""
    cfg = model.config
    windows = {cfg.layer_window(i) for i in range(cfg.n_layers)}
    return windows.pop() if len(windows) == 1 else None


def decoding_cache(model: torch.nn.Module, batch_size: int, T: int, N: int) -> KVCache:
    """The cache for prompts of T columns and N steps: every position, or, for a model whose every layer has a
    window, the prompt or the window and as many steps again (`step_inputs` then drops what no layer reads)."""
    window = sliding_window(model)
    return new_cache(model, batch_size, T + N if window is None else min(T + N, max(T, window) + window))


def step_inputs(model: torch.nn.Module, cache: KVCache, mask: torch.Tensor | None, padding: list[int]
                ) -> tuple[torch.Tensor | None, list[int]]:
    """Make room in a full `cache` for one more step (only a windowed model's fills up: it keeps the keys its
    window reads, `KVCache.keep_last`); then the step's mask, the padding mask (B, T + N)'s columns of the
    cached keys and the new token (None for a batch without padding), and each row's position (after its
    `padding`)."""
    if cache.length == cache.max_len:
        cache.keep_last(sliding_window(model) - 1)
    columns = mask[:, cache.offset:cache.offset + cache.length + 1] if mask is not None else None
    return columns, [cache.offset + cache.length - pad for pad in padding]


def new_cache(model: torch.nn.Module, batch_size: int, max_len: int) -> KVCache:
    """An empty KV cache for `batch_size` rows of up to `max_len` positions, on the model's device/dtype."""
    cfg, weight = model.config, next(model.parameters())
    return KVCache(cfg.n_layers, batch_size, cfg.n_kv_heads or cfg.n_heads, cfg.head_dim, max_len,
                   weight.dtype, weight.device)
