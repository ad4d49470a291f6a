"""What the masking objectives (masked LM, whole words, spans) read from a WordPiece tokenizer, and
how one example row becomes the (1, T) tensors they work on.

A row is an encoder example as the batch lays it out: "[CLS] … [SEP]" right-padded with [PAD].
Positions holding BERT's special tokens (padding included) are never chosen; continuation pieces
("##…") tell words apart for whole-word and span masking.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from lmlab.objectives.objective import Key, Objective, Tokens, torch_generator

BERT_SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")  # never masked; a WordPiece tokenizer must hold them


def continuation_table(vocab: dict[str, int]) -> torch.Tensor:
    """(V,) bool, True for the ids of continuation pieces ("##…"): index it with token ids (B, T)."""
    table = torch.zeros(max(vocab.values()) + 1, dtype=torch.bool)
    table[[i for token, i in vocab.items() if token.startswith("##")]] = True
    return table


@dataclass(frozen=True)
class MaskingIds:
    """A tokenizer's ids as masking needs them: the specials, [MASK], the size random tokens come
    from, and which ids continue a word."""

    special: torch.Tensor  # (n_special,) ids never chosen
    mask_id: int
    vocab_size: int
    continuation: torch.Tensor  # (V,) bool

    @classmethod
    def of(cls, tokenizer) -> "MaskingIds":
        """The ids of a WordPiece `tokenizers.Tokenizer` holding BERT_SPECIAL_TOKENS."""
        return cls(torch.tensor([tokenizer.token_to_id(t) for t in BERT_SPECIAL_TOKENS]),
                   tokenizer.token_to_id("[MASK]"), tokenizer.get_vocab_size(),
                   continuation_table(tokenizer.get_vocab()))

    def row(self, tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """One row's ids and its special positions (never chosen), each (1, T)."""
        ids = torch.from_numpy(np.array([tokens], dtype=np.int64))  # (1, T); numpy converts a list 4x faster
        return ids, torch.isin(ids, self.special)


def word_masking_objective(tokenizer, mask: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> Objective:
    """A masking function that reads word boundaries, `mask(ids, special, continuation, mask_id,
    vocab_size, generator)` on (1, T) tensors (whole words, spans), bound to a WordPiece tokenizer:
    objective(row, key) -> (inputs, targets), the mask drawn from the key's generator."""
    vocab = MaskingIds.of(tokenizer)

    def objective(tokens: Tokens, key: Key) -> tuple[Tokens, Tokens]:
        ids, special = vocab.row(tokens)  # (1, T) each
        continuation = vocab.continuation[ids]  # (1, T): True on "##" pieces
        inputs, targets = mask(ids, special, continuation, vocab.mask_id, vocab.vocab_size, torch_generator(key))
        return inputs[0].tolist(), targets[0].tolist()
    return objective
