"""Speculative decoding in the serving engine: every running slot drafts, and one pass checks all the drafts.

`lmlab serve --speculate lookup|MODEL` gives the engine a `Speculation`. Each step while at most
`Speculation.max_running` requests run (one, by default), each running slot drafts up to k tokens on its own
(`SlotDrafter`: prompt lookup over its own prompt and reply, or the draft model with a cache of its own for
that slot), and the engine feeds every slot its last token and its drafts in ONE forward
pass, rows padded to the longest draft (`slots.StepKV` with T tokens a row, each row at its own length). Padding
rather than grouping slots by draft length: a CPU step streams every weight once whatever the rows, so one pass
over B x (1 + k) tokens costs about one step, where one pass per group would cost one step per group; the padded
columns are written past what a row keeps and are cut off with its rejected drafts.

Each slot then walks its own logits with `speculative.choose` (the one accept/reject rule: greedy keeps a
draft while it is the argmax, so the tokens are exactly plain decoding's; sampling keeps the draft with
probability p(draft), else draws from p without it, so each token is distributed as p), keeps its accepted
drafts and one token of the model's own, and its cache row is cut back to the tokens it kept. A slot with
nothing to draft takes one token in the same pass; when no slot drafts, or more requests run, the step is the
plain one. An int4 / int8 Llama checks the drafts in one call of its fused C++ step, as it decodes. Every
emitted token comes with the model's logits at its position, so logprobs are the model's, speculated or not.
"""

from dataclasses import dataclass

import torch

from lmlab.generation.draft_model import ModelDrafter
from lmlab.generation.speculative import lookup_draft, next_draft_length


@dataclass(frozen=True)
class Speculation:
    """How the engine speculates: up to `draft_tokens` drafted tokens per slot a step, by prompt lookup (`draft`
    None) or by the draft model `draft` (same tokenizer as the served model), while at most `max_running`
    requests run. With more, the plain step already multiplies the weights by a row per request, and the padded
    check of every row's drafts costs more than the drafts save: SmolLM2 int4 at 4 clients served 0.51-0.56x of
    plain serving speculating (fp32 0.98-1.00x), at 1 client 1.02-1.12x with 3 drafted tokens
    (`benchmarks/serve.py --speculate lookup`)."""

    draft_tokens: int
    draft: torch.nn.Module | None = None
    max_running: int = 1


class SlotDrafter:
    """One slot's drafting: its tokens so far (prompt and reply), how many to draft next (HF's schedule, per
    slot), and its drafter; `max_len` bounds its prompt + reply (a draft model's cache is that long)."""

    def __init__(self, speculation: Speculation, prompt: list[int], max_len: int):
        self.ids = list(prompt)
        self.most = self.n_draft = speculation.draft_tokens
        self.drafter = lookup_draft if speculation.draft is None else ModelDrafter(speculation.draft, max_len)

    def add(self, token: int) -> None:
        """The slot emitted `token`."""
        self.ids.append(token)

    def propose(self, room: int) -> list[int]:
        """At most `room` draft tokens to follow the slot's tokens so far."""
        n = min(self.n_draft, room)
        return self.drafter(self.ids, n) if n > 0 else []

    def settle(self, drafted: int, kept: int) -> None:
        """`kept` of the `drafted` tokens were accepted: set how many the next step drafts."""
        if drafted:
            self.n_draft = next_draft_length(self.n_draft, self.most, kept_all=kept == drafted)


def padded_tokens(last: list[int], drafts: list[list[int]], device: torch.device) -> torch.Tensor:
    """(B, T) each row's last token then its drafts, padded with its last token to T = 1 + the longest draft
    (padding positions are never kept)."""
    width = 1 + max(map(len, drafts))
    return torch.tensor([[token, *draft, *[token] * (width - 1 - len(draft))] for token, draft in zip(last, drafts)],
                        device=device)
