"""The decoding loop for models that carry a state instead of a KV cache (n-gram, window LM, RNN).

Same contract as `decode.decode_steps`, for one prompt: read the prompt once, then feed back one
token per step. Greedy and sampling (temperature, top-k, top-p, repetition penalty) work as for
transformers; beam search is for transformers only.
"""

from collections.abc import Iterator

import torch

from lmlab.errors import LmlabError
from lmlab.generation.batch import check_token_ids
from lmlab.generation.config import GenerationConfig
from lmlab.generation.sampling import apply_repetition_penalty, next_token
from lmlab.models.stateful import StatefulLM


@torch.inference_mode()
def stateful_decode_steps(model: StatefulLM, prompt: list[int], config: GenerationConfig) -> Iterator[torch.Tensor]:
    """Yield the next token of `prompt`, shape (1,), once per step, until max_new_tokens or a stop id."""
    if not prompt:
        raise LmlabError("the prompt is empty; pass some text (or --add-bos)")
    check_token_ids(model, [prompt])
    if config.num_beams > 1:
        raise LmlabError(f"beam search is for transformer models; a {model.config.model_type} model "
                         "generates greedily or by sampling: drop --beams")
    generator = torch.Generator().manual_seed(config.seed) if config.seed is not None else None
    logits, state = model.step(torch.tensor([prompt]), model.initial_state(1))  # (1, V)
    seen = torch.zeros_like(logits, dtype=torch.bool)
    seen[0, prompt] = True
    for step in range(config.max_new_tokens):
        if config.repetition_penalty != 1.0:
            logits = apply_repetition_penalty(logits, seen, config.repetition_penalty)
        token = next_token(logits.float(), config.temperature, config.top_k, config.top_p, generator)  # (1,)
        yield token
        if token.item() in config.stop_ids or step == config.max_new_tokens - 1:
            return
        seen[0, token] = True
        logits, state = model.step(token[:, None], state)
