"""Helpers for the encoder parity tests: a random HF model whose every weight matters, and a
padded batch of sentence pairs, and the differences the tests compare."""

import torch


def randomized(model):
    """`model` in eval mode with noise added to every weight (HF zero-initialises biases and sets norms
    to one, which would hide a swapped bias or norm)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def padded_batch(vocab_size: int, pad_id: int = 0, types: bool = True):
    """Three rows of real ids (never `pad_id`), the last two right-padded, the second a pair."""
    ids = torch.randint(pad_id + 1, vocab_size, (3, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = pad_id
    token_types = torch.zeros_like(ids)
    if types:
        token_types[1, 5:9] = 1
    return ids, mask, token_types


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def real_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """The largest difference of per-token outputs a, b (B, T, ...) at the real tokens (mask (B, T), 1 = real).
    lmlab's encoders skip the padding (its hidden states are zeros); HF computes it, to no use."""
    return max_diff(a[mask.bool()], b[mask.bool()])
