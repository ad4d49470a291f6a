"""Decoding the models that carry a state instead of a KV cache (n-gram, window LM, RNN) with the
loops every lmlab model uses: `decode.token_steps` for greedy and sampling, `beam.beam_steps` for
beam search, so penalties, stop rules and beam scoring are the transformers' own.

Only the model calls are this file's: the prompt is read once by `model.step(ids, state)`, then each
step feeds back the newest token and the state. Beam search runs K copies of the prompt's state and
keeps the surviving beams' rows with the model's `reorder_state(state, rows)`; a model without one
generates greedily or by sampling only. One prompt at a time: each has its own state.
"""

from collections.abc import Iterator

import torch

from lmlab.errors import LmlabError
from lmlab.generation.batch import check_token_ids
from lmlab.generation.beam import beam_steps
from lmlab.generation.config import GenerationConfig
from lmlab.generation.decode import token_steps
from lmlab.generation.history import History
from lmlab.generation.output import Generation
from lmlab.models.stateful import StatefulLM


@torch.inference_mode()
def stateful_decode_steps(model: StatefulLM, prompt: list[int], config: GenerationConfig) -> Iterator[torch.Tensor]:
    """Yield the next token of `prompt`, shape (1,), once per step, until max_new_tokens or a stop id."""
    ids = prompt_ids(model, prompt)  # (1, T)
    logits, state = model.step(ids, model.initial_state(1))  # (1, V)

    def advance(token: torch.Tensor) -> torch.Tensor:
        nonlocal state
        logits, state = model.step(token[:, None], state)
        return logits.float()

    history = History(ids, None, logits.size(-1), config)
    yield from token_steps(logits.float(), advance, history, config, config.max_new_tokens)


@torch.inference_mode()
def stateful_beam_search(model: StatefulLM, prompt: list[int], config: GenerationConfig) -> Generation:
    """The best of config.num_beams beams after `prompt` (HF's rules, as `beam.beam_search`)."""
    ids = prompt_ids(model, prompt)  # (1, T)
    if not hasattr(model, "reorder_state"):
        raise LmlabError(f"beam search needs a model whose state can follow the beams; a {model.config.model_type} "
                         "model generates greedily or by sampling: drop --beams")
    K = config.num_beams
    logits, state = model.step(ids, model.initial_state(1))  # (1, V)
    state = model.reorder_state(state, torch.zeros(K, dtype=torch.long, device=logits.device))  # K copies

    def advance(new_token: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        nonlocal state
        logits, state = model.step(new_token[:, None], model.reorder_state(state, rows))
        return logits.float()

    history = History(ids.expand(K, -1), None, logits.size(-1), config)
    return beam_steps(logits.float().expand(K, -1), advance, history, config, K, config.max_new_tokens)[0]


def prompt_ids(model: StatefulLM, prompt: list[int]) -> torch.Tensor:
    """The prompt as ids (1, T), after one-line errors for an empty prompt and ids outside the vocabulary."""
    if not prompt:
        raise LmlabError("the prompt is empty; pass some text (or --add-bos)")
    check_token_ids(model, [prompt])
    return torch.tensor([prompt])
