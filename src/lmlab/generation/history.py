"""What each row has said so far, for the rules that look back: the repetition penalty and
no-repeat n-grams. Both decoding loops (step by step and beam search) keep one `History`.
"""

import torch

from lmlab.generation.config import GenerationConfig
from lmlab.generation.sampling import apply_repetition_penalty, ban_repeated_ngrams

NO_TOKEN = -1  # padding in the history: it never completes an n-gram


class History:
    """Each row's tokens so far (the prompt, or a decoder's start token, then the new ones).

    `apply` edits next-token scores (B, V) by the rules `config` turns on; `extend` appends one
    token per row, after keeping the rows `rows` (beam search's survivors). With neither rule on,
    it keeps nothing and costs nothing.
    """

    def __init__(self, ids: torch.Tensor, mask: torch.Tensor | None, vocab_size: int, config: GenerationConfig):
        self.penalty = config.repetition_penalty
        self.ngram = config.no_repeat_ngram_size
        real = ids if mask is None else ids.masked_fill(mask == 0, NO_TOKEN)  # (B, T)
        self.ids = real if self.ngram else None
        self.seen = None
        if self.penalty != 1.0:  # bool (B, V): padding goes to a spare column that is dropped
            seen = torch.zeros(ids.size(0), vocab_size + 1, dtype=torch.bool, device=ids.device)
            self.seen = seen.scatter_(1, real.masked_fill(real == NO_TOKEN, vocab_size), True)[:, :vocab_size]

    def apply(self, scores: torch.Tensor) -> torch.Tensor:
        """scores (B, V) with seen tokens penalised and n-gram repeats banned (-inf)."""
        if self.seen is not None:
            scores = apply_repetition_penalty(scores, self.seen, self.penalty)
        if self.ids is not None:
            scores = ban_repeated_ngrams(scores, self.ids, self.ngram)
        return scores

    def extend(self, tokens: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """Keep rows `rows` (B,) (all when None), then append tokens (B,)."""
        if self.seen is not None:
            self.seen = self.seen if rows is None else self.seen[rows]
            self.seen[torch.arange(tokens.size(0), device=tokens.device), tokens] = True
        if self.ids is not None:
            ids = self.ids if rows is None else self.ids[rows]
            self.ids = torch.cat([ids, tokens[:, None]], dim=1)
