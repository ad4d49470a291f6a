"""Perplexity: exp of the mean negative log-likelihood of each token given its prefix.

Texts longer than the model's context are scored in strided windows: each window re-reads up to
`context - stride` tokens of preceding context and scores only its last `stride` tokens, so every
token is scored once, with as much left context as the window allows.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from lmlab.data.blocks import gather
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.objectives.registry import REGISTRY
from lmlab.progress import progress_bar
from lmlab.targets import IGNORE_INDEX

NEXT_TOKEN = REGISTRY["causal_lm"].batch  # block (B, T+1) -> inputs, targets (B, T): what perplexity scores


@dataclass(frozen=True)
class Perplexity:
    tokens: int  # tokens in the text; the first has no prefix, so tokens - 1 are scored
    nll_sum: float  # nats
    perplexity: float

    def as_dict(self) -> dict:
        return {"tokens": self.tokens, "nll_sum": self.nll_sum, "perplexity": self.perplexity}


@torch.no_grad()
def perplexity(model: torch.nn.Module, ids: torch.Tensor, context_length: int, stride: int | None = None,
               show_progress: bool = False) -> Perplexity:
    """Perplexity of the token sequence `ids` (n,) under `model`, scoring tokens 2..n (`show_progress`: the
    tokens scored so far on a bar on stderr)."""
    n = ids.numel()
    if n < 2:
        raise ValueError("perplexity needs at least two tokens")
    stride = stride or max(1, context_length // 2)
    device = next(iter(model.parameters()), torch.empty(0)).device  # an n-gram model has no parameters
    ids = ids.to(device)
    nll, scored = 0.0, 0
    bar = progress_bar(n - 1, desc="perplexity", unit="token", unit_scale=True, disable=not show_progress, leave=False)
    for end in range(min(context_length, n), n + stride, stride):
        end = min(end, n)
        start = max(0, end - context_length)
        window = ids[start:end][None]  # (1, W)
        inputs, targets = NEXT_TOKEN(window)  # (1, W-1) each
        already = scored - start  # targets at index < already were scored by an earlier window
        targets[:, : max(0, already)] = IGNORE_INDEX
        nll += cross_entropy(model(inputs), targets, reduction="sum").item()
        bar.update(end - 1 - scored)
        scored = end - 1
        if end == n:
            break
    bar.close()
    mean = nll / (n - 1)
    return Perplexity(tokens=n, nll_sum=nll, perplexity=math.exp(mean) if mean < 700 else math.inf)  # exp overflows past ~709


@torch.no_grad()
def held_out_loss(model: torch.nn.Module, split, n_batches: int, batch_size: int,
                  device: torch.device | str) -> dict[str, float]:
    """val_loss and val_ppl over the first n_batches x batch_size held-out blocks of a `BlockSplit`:
    what pre-training logs at each evaluation."""
    starts = split.val_blocks[:n_batches * batch_size]
    loss = mean_block_loss(model, split.tokens, starts, split.block_size, batch_size, device)
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 700.0))}


def mean_block_loss(model: torch.nn.Module, tokens: np.ndarray, starts: np.ndarray, block_size: int,
                    batch_size: int, device: torch.device | str) -> float:
    """Mean next-token cross-entropy (nats) over the blocks at `starts` (validation loss)."""
    total, count = 0.0, 0
    for i in range(0, len(starts), batch_size):
        inputs, targets = NEXT_TOKEN(gather(tokens, starts[i:i + batch_size], block_size).to(device))
        total += cross_entropy(model(inputs), targets, reduction="sum").item()
        count += targets.numel()
    return total / count
