"""The logit lens (nostalgebraist, 2020): read every layer's residual stream as if it were the last.

Each layer's state (T, C) goes through the decoder's final norm and LM head, giving a next-token
distribution per layer and position. Early layers usually predict the input token or noise; the
answer appears, and sharpens, some way up the stack. At the last layer the lens is the model itself.
"""

from dataclasses import dataclass

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.inspect.layers import recording


@dataclass(frozen=True)
class LogitLens:
    """The K most likely next tokens at each layer (0 = the embeddings) and position, best first."""
    ids: torch.Tensor  # (L + 1, T, K)
    probs: torch.Tensor  # (L + 1, T, K)


@torch.no_grad()
def logit_lens(model: nn.Module, input_ids: torch.Tensor, top_k: int = 5) -> LogitLens:
    """The top-k next-token predictions of every layer of the decoder `model` for input_ids (1, T)."""
    if not hasattr(model, "lm_head") or hasattr(model, "encoder"):
        raise LmlabError("the logit lens reads decoder-only models (it needs the final norm and LM head of a "
                         "single stack); pick a decoder with --model")
    if not 1 <= top_k <= model.config.vocab_size:
        raise LmlabError(f"--top {top_k} must be between 1 and the vocabulary size {model.config.vocab_size}")
    with recording(model) as states:
        model(input_ids)
    tops = [model.lm_head(model.norm(state)).float().softmax(-1).topk(top_k, dim=-1) for state in states]  # (T, K) each
    return LogitLens(torch.stack([t.indices for t in tops]).cpu(), torch.stack([t.values for t in tops]).cpu())
