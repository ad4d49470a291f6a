"""Turning next-token logits into a token: repetition penalty, no-repeat n-grams, greedy, temperature,
top-k, top-p."""

import torch


def apply_repetition_penalty(scores: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Make the tokens marked in `seen` less likely (CTRL, Keskar et al. 2019, as in HF): their
    positive scores are divided by `penalty`, negative ones multiplied. scores (B, V), seen bool (B, V)."""
    if penalty == 1.0:
        return scores
    penalized = torch.where(scores < 0, scores * penalty, scores / penalty)
    return torch.where(seen, penalized, scores)


def ban_repeated_ngrams(scores: torch.Tensor, ids: torch.Tensor, n: int) -> torch.Tensor:
    """Set to -inf every token that would complete an n-gram already in its row (as HF's
    no_repeat_ngram_size): the tokens that followed an earlier occurrence of the row's last n-1
    tokens. scores (B, V); ids (B, T), the row so far, -1 on padding (never part of an n-gram)."""
    B, T = ids.shape
    if n < 1 or T < n:
        return scores
    windows = ids.unfold(1, n, 1)  # (B, T - n + 1, n): every n-gram so far
    suffix = ids[:, T - n + 1:]  # (B, n - 1): what the next token would extend
    repeats = (windows[:, :, :-1] == suffix[:, None, :]).all(-1) & (windows >= 0).all(-1)  # (B, W)
    V = scores.size(-1)
    banned = torch.zeros(B, V + 1, dtype=torch.bool, device=scores.device)
    banned.scatter_(1, torch.where(repeats, windows[:, :, -1], V), True)  # misses go to a spare column
    return scores.masked_fill(banned[:, :V], float("-inf"))


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Set to -inf every logit outside the top-k and outside the smallest set whose probability
    reaches top_p (the most likely token always stays). logits (B, V) -> (B, V)."""
    if top_k is not None and 0 < top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop_sorted = probs.cumsum(-1) - probs >= top_p  # mass before this token already enough
        drop_sorted[:, 0] = False  # the most likely token, even where top_p rounds to 0 in float32 (1e-50)
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick the next token for each row of logits (B, V) -> (B,). temperature 0 means greedy."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = filter_logits(logits.float() / temperature, top_k, top_p).softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
