"""Speculative decoding: guess a few tokens cheaply, then check them all in one forward pass of the model.

A one-token step of a small model on the CPU streams every weight from memory to make one token; a pass over
k + 1 tokens streams them once as well and costs little more. So each round drafts k tokens, runs the model
once over [last token, draft_1 .. draft_k] with the KV cache, and keeps the drafts for as long as each is the
token the model itself picks after the ones before it; the model's own pick replaces the first draft it
disagrees with (or follows the last draft), so a round gives 1 to k + 1 tokens, and the cache is cut back to
what was kept (`KVCache.truncate`). Greedy, the tokens are plain greedy decoding's; sampling, a draft d is kept
with probability p(d) and otherwise the token is drawn from p without d (the accept/reject rule of Leviathan
et al. 2023 for a draft that proposes d with certainty), which leaves every token's distribution p.

Drafts come from `lookup_draft`, prompt lookup decoding (Saxena 2023; HF's `prompt_lookup_num_tokens`): the
tokens that followed the latest earlier occurrence of the last few tokens in the prompt and the reply so far,
no second model needed. It pays where the reply copies its input: summaries, answers from a passage, edits.
A smaller model with the same tokenizer drafts too (`draft_model.py`: HF's assisted generation).
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from lmlab.generation.batch import check_prompts, new_cache
from lmlab.generation.config import GenerationConfig
from lmlab.generation.decode import prompt_logits
from lmlab.generation.fused import fused_step
from lmlab.generation.history import History
from lmlab.generation.layout import decoding_view
from lmlab.generation.sampling import filter_logits

Drafter = Callable[[list[int], int], list[int]]  # (the tokens so far, at most how many) -> draft tokens
MAX_NGRAM = 3  # prompt lookup matches the last 3 tokens, else 2, else 1


@dataclass
class Acceptance:
    """How many draft tokens the model was shown and how many it kept, over one or more generations."""

    drafted: int = 0
    accepted: int = 0
    passes: int = 0  # forward passes of the model after the prompt
    tokens: int = 0  # tokens those passes produced

    @property
    def rate(self) -> float:
        """accepted / drafted (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0


def lookup_draft(ids: list[int], n: int, max_ngram: int = MAX_NGRAM) -> list[int]:
    """`n` tokens copied from what followed the latest earlier occurrence of the last m tokens of `ids` (m from
    `max_ngram` down to 1), the copy running on into its own output where it reaches the end (as LZ77 copies:
    a loop of p tokens is drafted as going on); [] when not even the last token occurred before."""
    for m in range(min(max_ngram, len(ids) - 1), 0, -1):
        tail = ids[-m:]
        for start in range(len(ids) - m - 1, -1, -1):  # latest first
            if ids[start:start + m] == tail:
                copied = list(ids)
                for j in range(n):
                    copied.append(copied[start + m + j])
                return copied[len(ids):]
    return []


@torch.inference_mode()
def speculative_steps(model: torch.nn.Module, prompt: list[int], config: GenerationConfig, drafter: Drafter,
                      acceptance: Acceptance | None = None) -> Iterator[torch.Tensor]:
    """Yield one prompt's next token, (1,), as `decode_steps` does (the same tokens, greedy), drafting up to
    `config.draft_tokens` tokens a round with `drafter` (fewer after rounds that missed) and verifying them in one
    pass; the counts go to `acceptance`."""
    check_prompts(model, [prompt], config.max_new_tokens)
    acceptance = acceptance if acceptance is not None else Acceptance()
    device = next(model.parameters()).device
    N, n_draft = config.max_new_tokens, config.draft_tokens
    ids = torch.tensor([prompt], device=device)  # (1, T)
    cache = new_cache(model, 1, len(prompt) + N)  # never a window's: rollback needs every column
    step_model, fused = decoding_view(model), fused_step(model)
    logits = prompt_logits(model, fused, ids, None, cache)  # (1, V)
    history = History(ids, None, logits.size(-1), config)
    generator = torch.Generator(device).manual_seed(config.seed) if config.seed is not None else None
    so_far, draft = list(prompt), []
    while True:
        for i, scores in enumerate(logits):  # (V,) after so_far, then after each draft token
            proposed = draft[i] if i < len(draft) else None
            token, accepted = choose(history.apply(scores[None])[0], proposed, config, generator)
            acceptance.accepted += accepted
            so_far.append(token)
            acceptance.tokens += 1
            yield torch.tensor([token], device=device)
            if token in config.stop_ids or len(so_far) - len(prompt) == N:
                return
            history.extend(torch.tensor([token], device=device))
            if not accepted:
                break
        cache.truncate(cache.length - (len(logits) - 1 - i))  # drop the drafts after the i kept ones
        if draft:
            n_draft = next_draft_length(n_draft, config.draft_tokens, kept_all=i == len(draft))
        draft = drafter(so_far, min(n_draft, N - (len(so_far) - len(prompt)) - 1))
        acceptance.drafted += len(draft)
        step = torch.tensor([[so_far[-1], *draft]], device=device)  # (1, 1 + k)
        if fused is not None:  # a quantized model: the 1 + k tokens through its C++ step at once, weights read once
            logits = fused(step, cache.k, cache.v, [cache.length])[0]  # (1 + k, V)
            cache.advance(step.size(1))
        else:
            hidden = step_model.hidden_states(step, None, None, kv_cache=cache)  # (1, 1 + k, C)
            logits = step_model.logits(hidden[0]).float()  # (1 + k, V)
        acceptance.passes += 1


def next_draft_length(n_draft: int, most: int, kept_all: bool) -> int:
    """How many tokens the next round drafts (HF's schedule): two more, up to `most`, after a round that kept
    every draft; one fewer, down to 1, after a miss."""
    return min(most, n_draft + 2) if kept_all else max(1, n_draft - 1)


def choose(scores: torch.Tensor, proposed: int | None, config: GenerationConfig,
           generator: torch.Generator | None) -> tuple[int, bool]:
    """The token to emit from the model's scores (V,) where a draft `proposed` (or None) stands, and whether
    it is that draft. Greedy: the argmax. Sampling: the draft with probability p(draft), else a token drawn
    from p with the draft's probability set to 0 (so each token has probability p overall)."""
    if config.temperature == 0:
        token = int(scores.argmax())
        return token, token == proposed
    probs = filter_logits(scores[None].float() / config.temperature, config.top_k, config.top_p).softmax(-1)[0]
    if proposed is not None:
        if torch.rand((), generator=generator, device=probs.device) < probs[proposed]:
            return proposed, True
        rest = probs.clone()
        rest[proposed] = 0
        probs = rest if rest.sum() > 0 else probs
    return int(torch.multinomial(probs, 1, generator=generator)), False
