"""Masked language modelling (BERT) as a transformation of token ids: hide some tokens, predict them.

Of the tokens that may be chosen (never [CLS], [SEP], [PAD] or other special tokens), each is
chosen with probability `rate` (15%). A chosen token becomes [MASK] 80% of the time, a random token
10% of the time and stays as it is 10% of the time, so the model cannot learn that only [MASK]
positions matter: it must keep a good representation of every token. The loss is on the chosen
positions only (targets elsewhere are IGNORE_INDEX).

Masks are drawn from `generator`: drawing them again for every epoch (`objectives.dynamic_masking`)
is RoBERTa's dynamic masking; BERT drew them once per example when preparing its data. Which
tokens are chosen is the variant (whole words, spans); `corrupt` then treats every chosen token
the same way.
"""

import torch

from lmlab.objectives.masking_row import MaskingIds
from lmlab.objectives.objective import Key, Objective, Tokens, torch_generator
from lmlab.targets import IGNORE_INDEX

MASK_SHARE, RANDOM_SHARE = 0.8, 0.1  # of the chosen tokens; the remaining 10% stay unchanged


def masked_lm(ids: torch.Tensor, special: torch.Tensor, mask_id: int, vocab_size: int,
              generator: torch.Generator | None = None, rate: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (B, T) -> inputs (B, T) with the chosen tokens masked, replaced or kept, and targets (B, T):
    the original id at chosen positions, IGNORE_INDEX elsewhere.

    special (B, T) bool marks the positions that are never chosen (special tokens and padding).
    """
    draw = torch.rand(ids.shape, generator=generator, device=ids.device)  # (B, T) chooses
    return corrupt(ids, (draw < rate) & ~special, mask_id, vocab_size, generator)


def corrupt(ids: torch.Tensor, chosen: torch.Tensor, mask_id: int, vocab_size: int,
            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 on the `chosen` (B, T) tokens of ids (B, T): [MASK], a random token, or
    unchanged, drawn per token. Returns (inputs, targets) as `masked_lm` does."""
    how = torch.rand(ids.shape, generator=generator, device=ids.device)  # (B, T) picks mask/random/keep
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator, device=ids.device)  # (B, T)
    inputs = torch.where(chosen & (how < MASK_SHARE), mask_id, ids)
    inputs = torch.where(chosen & (how >= MASK_SHARE) & (how < MASK_SHARE + RANDOM_SHARE), random_ids, inputs)
    targets = torch.where(chosen, ids, IGNORE_INDEX)
    return inputs, targets


def masked_lm_objective(tokenizer) -> Objective:
    """`masked_lm` bound to a WordPiece tokenizer: objective(row, key) -> (inputs, targets), the
    row (T,) as the batch pads it, the mask drawn from the key's generator."""
    vocab = MaskingIds.of(tokenizer)

    def objective(tokens: Tokens, key: Key) -> tuple[Tokens, Tokens]:
        ids, special = vocab.row(tokens)  # (1, T) each
        inputs, targets = masked_lm(ids, special, vocab.mask_id, vocab.vocab_size, torch_generator(key))
        return inputs[0].tolist(), targets[0].tolist()
    return objective
