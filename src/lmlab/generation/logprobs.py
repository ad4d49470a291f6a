"""The next-token distribution after a prompt: which tokens the model expects, and how strongly."""

import torch

from lmlab.errors import LmlabError
from lmlab.generation.batch import check_prompts
from lmlab.generation.decode import last_logits


@torch.no_grad()
def top_logprobs(model: torch.nn.Module, prompt_ids: list[int], top: int) -> list[tuple[int, float]]:
    """The `top` most likely next tokens after `prompt_ids` as (token id, log-probability), best first."""
    check_prompts(model, [prompt_ids], 0)
    vocab_size = model.config.vocab_size
    if not 1 <= top <= vocab_size:
        raise LmlabError(f"top {top} must be between 1 and the vocabulary size ({vocab_size})")
    device = next(model.parameters()).device
    logprobs = last_logits(model, torch.tensor([prompt_ids], device=device))[0].log_softmax(dim=-1)  # (V,)
    values, ids = logprobs.topk(top)
    return list(zip(ids.tolist(), values.tolist()))
