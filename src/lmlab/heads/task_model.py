"""An encoder with a task head on top: the network `lmlab finetune` trains.

A task head takes sizes, never an encoder: it maps what the encoder gives to logits, and says
which output it reads in its `reads` attribute:

    "pooled"           head(pooled (N, C)): the encoder's [CLS] vector (`encoder.pooled(...)`)
    "hidden"           head(hidden (N, T, C)): the last hidden states (`encoder(...)`)
    "hidden and mask"  head(hidden (N, T, C), attention_mask (N, T)): padding matters to the head

`EncoderWithHead` runs any encoder with that interface (BERT, RoBERTa, ALBERT, ELECTRA) and then
the head. Inputs of multiple choice, (B, K, T) ids, are flattened to B*K sequences and the head's
one score per sequence comes back as (B, K), as in HF's BertForMultipleChoice.
"""

import torch
from torch import nn

READS = ("pooled", "hidden", "hidden and mask")


class EncoderWithHead(nn.Module):
    """encoder, then head: ids (B, T) or (B, K, T) -> the head's logits for each sequence."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        if head.reads not in READS:
            raise ValueError(f"{type(head).__name__}.reads is {head.reads!r}, not one of {READS}")
        self.encoder = encoder
        self.head = head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None):
        if input_ids.dim() == 3:  # multiple choice: (B, K, T) -> (B*K, T), scores (B*K,) -> (B, K)
            B, K, T = input_ids.shape
            flat = [None if t is None else t.reshape(B * K, T) for t in (input_ids, attention_mask, token_type_ids)]
            return self(*flat).view(B, K)
        if self.head.reads == "pooled":
            return self.head(self.encoder.pooled(input_ids, attention_mask, token_type_ids))  # (B, C) -> logits
        hidden = self.encoder(input_ids, attention_mask, token_type_ids)  # (B, T, C)
        if self.head.reads == "hidden and mask":
            return self.head(hidden, attention_mask)
        return self.head(hidden)
