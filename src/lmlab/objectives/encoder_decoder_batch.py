"""One training batch for an encoder-decoder transformer (T5, BART, Pegasus, Marian) from
(inputs, targets) id pairs, as every pre-training objective here produces them: teacher forcing
(`teacher_forcing`) plus the attention masks, under the names Hugging Face models use.

    target             y1 y2 y3 </s>
    decoder_input_ids  <start> y1 y2 y3      (the target shifted right)
    labels             y1 y2 y3 </s>         (IGNORE_INDEX on padding)
"""

import torch

from lmlab.errors import LmlabError
from lmlab.objectives.teacher_forcing import teacher_forcing


def length_mask(rows: list[list[int]]) -> torch.Tensor:
    """(B, L) long: 1 on each row's real positions, 0 on the right padding of `pad_rows`."""
    width = max(len(row) for row in rows)
    return torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows], dtype=torch.long)


def encoder_decoder_batch(pairs: list[tuple[list[int], list[int]]], pad_id: int, decoder_start_id: int,
                          eos_id: int | None = None) -> dict[str, torch.Tensor]:
    """(inputs, targets) pairs -> input_ids, attention_mask (B, S); decoder_input_ids, labels,
    decoder_attention_mask (B, T). With eos_id, eos is appended to each target first (inputs are
    used as given: add eos to them too if the model was trained so, as T5 and BART are)."""
    if not pairs:
        raise LmlabError("an encoder-decoder batch needs at least one (inputs, targets) pair")
    sources = [list(source) for source, _ in pairs]
    targets = [list(target) + ([eos_id] if eos_id is not None else []) for _, target in pairs]
    for k, (source, target) in enumerate(zip(sources, targets)):
        if not source:
            raise LmlabError(f"pair {k} has empty inputs; drop it from the batch")
        if not target:
            raise LmlabError(f"pair {k} has empty targets; drop it from the batch or pass eos_id")
    input_ids, decoder_input_ids, labels = teacher_forcing(sources, targets, decoder_start_id, pad_id)
    return {"input_ids": input_ids,  # (B, S)
            "attention_mask": length_mask(sources),  # (B, S)
            "decoder_input_ids": decoder_input_ids,  # (B, T)
            "labels": labels,  # (B, T)
            "decoder_attention_mask": length_mask(targets)}  # (B, T)
