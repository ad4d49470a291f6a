"""A smaller decoder as the drafter of speculative decoding (HF's assisted generation, llama.cpp's `-md`).

The draft model proposes k tokens greedily, one cheap step each, with a KV cache of its own; the target then
checks them in one pass (`speculative.py`). Each round the drafter is shown the tokens so far: it keeps the
part of its cache that still agrees with them, truncates the rest (the drafts the target rejected), and
feeds only what it has not seen (the target's own token, and the drafts it kept). Its drafts are certain
(argmax), so the target's accept/reject rule for a certain draft keeps sampling exact.
"""

import torch

from lmlab.errors import LmlabError
from lmlab.generation.batch import new_cache
from lmlab.generation.decode import last_logits
from lmlab.generation.fused import fused_step
from lmlab.generation.layout import decoding_view


def check_draft_model(model: torch.nn.Module, draft: torch.nn.Module) -> None:
    """One line when `draft` cannot draft for `model`: a vocabulary of another size (another tokenizer)."""
    if draft.config.vocab_size != model.config.vocab_size:
        raise LmlabError(f"the draft model has a vocabulary of {draft.config.vocab_size} tokens and the model "
                         f"{model.config.vocab_size}: a draft model needs the same tokenizer; pass --speculate "
                         "lookup or a draft of the same family")


class ModelDrafter:
    """`drafter(ids, n)`: the draft model's n greedy tokens after `ids`, for sequences of up to `max_len`."""

    def __init__(self, draft: torch.nn.Module, max_len: int):
        if max_len > draft.config.context_length:
            raise LmlabError(f"the draft model's context of {draft.config.context_length} tokens is shorter than "
                             f"the prompt and reply ({max_len}); ask for fewer --max-new-tokens")
        self.model, self.view, self.fused = draft, decoding_view(draft), fused_step(draft)
        self.cache = new_cache(draft, 1, max_len)
        self.seen: list[int] = []  # the tokens whose keys and values the cache holds

    @torch.inference_mode()
    def __call__(self, ids: list[int], n: int) -> list[int]:
        if n == 0:
            return []
        same = next((i for i, (a, b) in enumerate(zip(self.seen, ids)) if a != b), min(len(self.seen), len(ids)))
        same = min(same, len(ids) - 1)  # the last token is fed again: its logits give the first draft
        self.cache.truncate(same)
        device = self.cache.k[0].device
        logits = self.feed(ids[same:], device)  # (1, V)
        draft = []
        for _ in range(n):
            draft.append(int(logits.argmax()))
            if len(draft) < n:  # the last draft is not fed: the next round may reject it
                logits = self.feed(draft[-1:], device)
        self.seen = ids + draft[:-1]
        return draft

    def feed(self, tokens: list[int], device: torch.device) -> torch.Tensor:
        """The draft model's logits (1, V) after `tokens`, added to its cache: one token by the fused step where
        the draft has one (an int4 / int8 Llama-style draft), several (a prompt) through the plain layout."""
        if len(tokens) > 1:
            return last_logits(self.model, torch.tensor([tokens], device=device), None, self.cache)
        if self.fused is None:
            return last_logits(self.view, torch.tensor([tokens], device=device), None, self.cache)
        logits = self.fused(torch.tensor(tokens, device=device), self.cache.k, self.cache.v, [self.cache.length])
        self.cache.advance(1)
        return logits
