"""Activation patching (causal tracing, Meng et al. 2022): where in a decoder a fact is carried.

Run a clean prompt ("The Eiffel Tower is in the city of") and a corrupted one of the same token
length ("The Colosseum is in the city of"). Then, for every layer l (0 = the token embeddings, i =
the output of block i) and position t, rerun the corrupted prompt with the single residual state
(l, t) restored from the clean run, and read the probability of the target (" Paris"). A state that
brings the clean answer back carries the information that the corruption removed.

`recovery` rescales each probability to (p - p_corrupt) / (p_clean - p_corrupt): 1 = fully restored,
0 = no better than the corrupted run. One forward pass per (layer, position): (n_layers + 1) * T runs.
"""

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.generation.decode import last_logits
from lmlab.inspect.layers import patching, recording
from lmlab.inspect.saliency import single_token
from lmlab.inspect.subject import prompt_ids
from lmlab.progress import progress_bar


@dataclass(frozen=True)
class CausalTrace:
    """p(target) after restoring each clean state (layer, position) into the corrupted run."""

    clean_tokens: list[str]
    corrupt_tokens: list[str]
    target: str
    p_clean: float
    p_corrupt: float
    probs: list[list[float]]  # (n_layers + 1, T)
    recovery: list[list[float]]  # (n_layers + 1, T): (p - p_corrupt) / (p_clean - p_corrupt)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def causal_trace(model: nn.Module, tokenizer, clean: str, corrupt: str, target: str | None = None,
                 show_progress: bool = False) -> CausalTrace:
    """Restore each (layer, position) state of the `clean` run into the `corrupt` run of a decoder and
    record p(`target`) (one token; default: the clean run's top next token)."""
    clean_ids, corrupt_ids = prompt_ids(model, tokenizer, clean, "--clean"), tokenizer.encode(corrupt)
    if len(clean_ids) != len(corrupt_ids):
        raise LmlabError(f"--clean is {len(clean_ids)} tokens and --corrupt is {len(corrupt_ids)}: patching needs "
                         "texts of the same token length; reword --corrupt")
    device = next(model.parameters()).device
    clean_t = torch.tensor([clean_ids], device=device)  # (1, T)
    corrupt_t = torch.tensor([corrupt_ids], device=device)  # (1, T)

    def probs(ids: torch.Tensor) -> torch.Tensor:  # (1, T) -> next-token probabilities (vocab,)
        return last_logits(model, ids)[0].softmax(-1)

    with torch.no_grad(), recording(model) as states:
        clean_probs = probs(clean_t)
        clean_states = [state.clone() for state in states]  # n_layers + 1 of (T, C)
    target_id = int(clean_probs.argmax()) if target is None else single_token(tokenizer, target)
    with torch.no_grad():
        p_corrupt = float(probs(corrupt_t)[target_id])
    p_clean = float(clean_probs[target_id])
    if abs(p_clean - p_corrupt) < 1e-6:
        raise LmlabError(f"the clean and corrupted prompts give the target the same probability ({p_clean:.4g}), "
                         "so there is nothing to restore; choose a --corrupt prompt that changes the answer")

    T, layers = len(clean_ids), len(clean_states)
    table = torch.zeros(layers, T)  # (n_layers + 1, T)
    bar = progress_bar(layers * T, desc="patching", unit="run", disable=not show_progress)
    with torch.no_grad():
        for layer in range(layers):
            for position in range(T):
                with patching(model, layer, position, clean_states[layer][position]):
                    table[layer, position] = probs(corrupt_t)[target_id]
                bar.update()
    bar.close()
    recovery = (table - p_corrupt) / (p_clean - p_corrupt)
    return CausalTrace([tokenizer.token_text(i) for i in clean_ids], [tokenizer.token_text(i) for i in corrupt_ids],
                       tokenizer.token_text(target_id), p_clean, p_corrupt, table.tolist(), recovery.tolist())
