"""Log-likelihood of continuations: the scoring every prompting evaluation runs on.

A multiple-choice question, a factual probe or a cloze word asks the same thing: how likely is each
continuation after one context? The context runs through the model once and its KV cache is shared by
every continuation, which then run together in one batched forward, right-padded (causal attention
never lets a real token see the padding after it). A few-shot prompt of hundreds of tokens followed by
four one-word choices costs one pass over the prompt, not four.

Contexts and continuations are split into tokens the way lm-evaluation-harness does (`split_pair`), so
the numbers compare with its own.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lmlab.errors import LmlabError
from lmlab.generation.batch import new_cache
from lmlab.generation.decode import last_logits


@dataclass(frozen=True)
class Continuation:
    """How a model scores one continuation after its context."""

    logprob: float  # sum of the continuation tokens' log-probabilities (nats)
    greedy: bool  # each continuation token is the model's most likely one at its position
    tokens: int  # continuation length in tokens

    def as_dict(self) -> dict:
        return {"logprob": self.logprob, "greedy": self.greedy, "tokens": self.tokens}


def split_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) as lm-evaluation-harness cuts them: spaces that end the context
    move to the continuation, the pair is encoded whole and the continuation is what follows the
    context's own encoding (so a merge across the boundary stays in the continuation)."""
    stripped = context.rstrip(" ")
    continuation = context[len(stripped):] + continuation
    context_ids = tokenizer.encode(stripped)
    whole = tokenizer.encode(stripped + continuation)
    return context_ids, whole[len(context_ids):]


@torch.no_grad()
def score_continuations(model: torch.nn.Module, context: Sequence[int],
                        continuations: Sequence[Sequence[int]]) -> list[Continuation]:
    """Each continuation's log-probability after `context` (token ids): one pass over the context,
    one batched pass over the continuations. A context too long for the model loses its oldest
    tokens, as much as the longest continuation needs."""
    if not context:
        raise LmlabError("a continuation needs a context of at least one token to be scored after")
    if not continuations or any(not c for c in continuations):
        raise LmlabError("every continuation needs at least one token")
    longest = max(len(c) for c in continuations)
    limit = model.config.context_length
    if longest >= limit:
        raise LmlabError(f"a continuation of {longest} tokens leaves no room for its context in the model's "
                         f"{limit}-token window")
    context = list(context)[-(limit - longest + 1):]  # the last continuation token is never fed
    device = next(model.parameters()).device
    cache = new_cache(model, 1, len(context) + longest - 1)
    first = last_logits(model, torch.tensor([context], device=device), cache=cache)  # (1, V)
    logits = first.expand(len(continuations), -1)[:, None]  # (N, 1, V): the first token of each continuation
    if longest > 1:
        cache.reorder(torch.zeros(len(continuations), dtype=torch.long, device=device))  # one copy per continuation
        fed = torch.tensor([list(c[:-1]) + [0] * (longest - len(c)) for c in continuations], device=device)  # (N, L-1)
        rest = model.logits(model.hidden_states(fed, kv_cache=cache)).float()  # (N, L-1, V)
        logits = torch.cat([logits, rest], dim=1)  # (N, L, V)
    logprobs = logits.log_softmax(-1)
    results = []
    for row, tokens in zip(logprobs, continuations):
        target = torch.tensor(tokens, device=device)
        picked = row[:len(tokens)].gather(-1, target[:, None]).squeeze(-1)  # (L_i,)
        greedy = bool((row[:len(tokens)].argmax(-1) == target).all())
        results.append(Continuation(float(picked.sum()), greedy, len(tokens)))
    return results
