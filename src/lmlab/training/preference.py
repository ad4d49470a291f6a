"""What a preference method does with its pairs and rankings: batches of answers, their log-probabilities,
and the frozen reference policy.

Every method that holds a policy near where it started (DPO, PPO, and any that follows, such as IPO or
KTO) needs the same three pieces:

- answers in one batch: a batch of B pairs is 2B chats, the chosen answers after their prompts and
  then the rejected ones (`pair_chats`), so one forward pass scores both; a reward model's batch of
  rankings is every answer of every ranking (`ranking_chats`);
- log p(answer | prompt) of each answer under a model (`pair_logprobs`: (B, 2), chosen then rejected);
- the reference: the policy as training starts. With a fresh PEFT adapter it costs no second model:
  it is the same network with its adapters switched off (`reference_is_adapters_off`). Otherwise the
  starting weights are gone once training moves them, so DPO computes the reference log-probs of
  every pair once, before the first step, and keeps them in `session.state`, where a checkpoint saves
  them for an exact resume (`pair_reference`); PPO, which scores new samples every rollout, keeps a
  frozen copy of the starting model instead (`frozen_reference`).

Where the pairs and rankings come from is `training.preference_data`.
"""

import copy
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from lmlab.losses.dpo import sequence_logprobs
from lmlab.modules.peft import adapters_disabled
from lmlab.objectives.sft import sft_batch
from lmlab.targets import IGNORE_INDEX
from lmlab.tokenizers.text import TextTokenizer
from lmlab.training.loop import Session, evaluated
from lmlab.training.post_training import Tunable, trim_padding, with_reply
from lmlab.training.preference_data import Pair, Ranking

Logits = Callable[[torch.Tensor], torch.Tensor]  # input_ids (B, T) -> logits (B, T, V)


def pair_chats(pairs: list[Pair]) -> list[list[dict]]:
    """The 2B chats of B pairs: each chosen answer after its prompt, then each rejected one, so that
    scores of the whole batch (2B,) view as (2, B)."""
    return ([with_reply(prompt, chosen) for prompt, chosen, _ in pairs]
            + [with_reply(prompt, rejected) for prompt, _, rejected in pairs])


def ranking_chats(rankings: list[Ranking]) -> list[list[dict]]:
    """Every answer of every ranking after its prompt, ranking by ranking and best first: one batch
    whose scores (sum of K,) split by each ranking's K."""
    return [with_reply(prompt, answer) for prompt, answers in rankings for answer in answers]


def pair_logprobs(model: Logits, tokenizer: TextTokenizer, pairs: list[Pair], block_size: int,
                  device: torch.device) -> torch.Tensor:
    """log p(answer | prompt) of the chosen and the rejected answer of each pair under `model`, in one
    batch whose padding after the longest answer is dropped: (B, 2)."""
    inputs, targets = trim_padding(*sft_batch(tokenizer, pair_chats(pairs), block_size))  # (2B, T)
    logps = sequence_logprobs(model(inputs.to(device)), targets.to(device))  # (2B,)
    return logps.view(2, len(pairs)).T  # (B, 2)


def pair_lengths(tokenizer: TextTokenizer, pairs: list[Pair], block_size: int) -> torch.Tensor:
    """The token counts of the chosen and the rejected answer of each pair, as `pair_logprobs` sums
    over them (the losses that average per token: IPO, SimPO, ORPO): (B, 2)."""
    _, targets = sft_batch(tokenizer, pair_chats(pairs), block_size)  # (2B, T)
    return (targets != IGNORE_INDEX).sum(dim=1).view(2, len(pairs)).T  # (B, 2)


def reference_is_adapters_off(tuned: Tunable, adapter: str | Path | None) -> bool:
    """Whether the reference is the tuned network with its adapters off: a fresh adapter trains and
    the base weights never move. A saved adapter trained further (`adapter`) was the start, so
    switching it off would give the wrong reference; with no adapter at all there is none to switch."""
    return tuned.method != "none" and adapter is None


def adapters_off(model: nn.Module) -> Logits:
    """input_ids -> the logits of `model` with its PEFT adapters switched off (the base model)."""
    def logits(input_ids: torch.Tensor) -> torch.Tensor:
        with adapters_disabled(model):
            return model(input_ids)
    return logits


def frozen_reference(tuned: Tunable, adapter: str | Path | None) -> Logits:
    """input_ids -> the reference policy's logits, for a method that scores new samples each step
    (PPO): the network with its adapters off, else a frozen copy of the starting model."""
    if reference_is_adapters_off(tuned, adapter):
        return adapters_off(tuned.model)
    return copy.deepcopy(tuned.model).eval().requires_grad_(False)


def pair_reference(session: Session, tuned: Tunable, adapter: str | Path | None, parts: dict[str, list[Pair]],
                   block_size: int, batch_size: int) -> Callable[[str, list[int]], torch.Tensor]:
    """(part, indices) -> the reference's log-probs (B, 2) of pairs `indices` of `parts[part]` (the
    training or held-out pairs). With a fresh adapter they are computed under the adapters-off
    network; otherwise they are computed for every pair once, before the first step, and kept in
    `session.state["reference"]` (a resumed run reads them from its checkpoint)."""
    if reference_is_adapters_off(tuned, adapter):
        base = adapters_off(tuned.model)

        def adapters_off_logprobs(part: str, indices: list[int]) -> torch.Tensor:
            with torch.no_grad():
                return pair_logprobs(base, tuned.tokenizer, [parts[part][i] for i in indices], block_size,
                                     tuned.device)
        return adapters_off_logprobs
    if "reference" not in session.state:
        session.state["reference"] = evaluated(tuned.model, lambda: {
            part: all_pair_logprobs(tuned, pairs, block_size, batch_size) for part, pairs in parts.items()})
    return lambda part, indices: session.state["reference"][part][indices].to(tuned.device)


def all_pair_logprobs(tuned: Tunable, pairs: list[Pair], block_size: int, batch_size: int) -> torch.Tensor:
    """`pair_logprobs` of every pair under the tuned model as it is now, in batches, on the CPU: (N, 2)."""
    chunks = [pair_logprobs(tuned.model, tuned.tokenizer, pairs[i:i + batch_size], block_size, tuned.device).cpu()
              for i in range(0, len(pairs), batch_size)]
    return torch.cat(chunks) if chunks else torch.empty(0, 2)
