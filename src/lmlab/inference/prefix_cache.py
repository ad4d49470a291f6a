"""Prompt prefixes computed once: the keys and values of recent prompts, reused by later ones.

Requests to a server often start alike: the same system prompt, or a chat whose next turn repeats
the whole conversation so far. A prompt's keys and values at position p depend on its tokens up to
p only (causal attention), so a new prompt that starts with the first n tokens of a stored one can
copy those n positions and prefill just the rest. The store keeps whole prompts, newest last, and
forgets the least recently used ones beyond a budget of positions.
"""

from dataclasses import dataclass

import torch


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    adapter: int  # the LoRA adapter that computed them (-1: the base model): another one's keys differ
    keys: list[torch.Tensor]  # per layer (H_kv, n, D)
    values: list[torch.Tensor]


class PrefixCache:
    """Stored prompts' keys and values, at most `budget` positions in all (0 turns it off)."""

    def __init__(self, budget: int):
        self.budget = budget
        self.entries: list[_Entry] = []  # least recently used first
        self.hits = 0  # lookups that reused something
        self.reused = 0  # positions not computed again, in all

    def lookup(self, prompt: list[int], adapter: int = -1) -> tuple[int, list[torch.Tensor], list[torch.Tensor]] | None:
        """The longest prefix of `prompt` stored by the same `adapter`, leaving at least its last token to
        compute (the logits for the first new token come from it): (n, keys, values) per layer (H_kv, n, D),
        or None."""
        best, best_n = None, 0
        for entry in self.entries:
            if entry.adapter != adapter:
                continue
            n = _common_length(entry.tokens, prompt, len(prompt) - 1)
            if n > best_n:
                best, best_n = entry, n
        if best is None:
            return None
        self.entries.remove(best)
        self.entries.append(best)  # most recently used
        self.hits += 1
        self.reused += best_n
        return best_n, [k[:, :best_n] for k in best.keys], [v[:, :best_n] for v in best.values]

    def store(self, prompt: list[int], keys: list[torch.Tensor], values: list[torch.Tensor],
              adapter: int = -1) -> None:
        """Keep `prompt`'s keys and values (per layer (H_kv, len(prompt), D)) as computed with `adapter`; a
        prompt of the same adapter stored before that is a prefix of this one is dropped (this one serves
        all its lookups)."""
        if len(prompt) > self.budget:
            return
        tokens = tuple(prompt)
        self.entries = [e for e in self.entries if e.adapter != adapter or tokens[:len(e.tokens)] != e.tokens]
        self.entries.append(_Entry(tokens, adapter, keys, values))
        while sum(len(e.tokens) for e in self.entries) > self.budget:
            self.entries.pop(0)


def _common_length(stored: tuple[int, ...], prompt: list[int], limit: int) -> int:
    """How many first tokens `stored` and `prompt` share, at most `limit`."""
    n = 0
    for a, b in zip(stored, prompt[:limit]):
        if a != b:
            break
        n += 1
    return n
