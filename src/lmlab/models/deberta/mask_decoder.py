"""DeBERTa's enhanced mask decoder (EMD): absolute positions, added just before the masked-LM head.

Relative positions alone cannot tell "a new store opened beside the new mall" which "new" is the
subject: the two have the same neighbours at the same distances. DeBERTa's blocks see relative
positions only, so the model adds absolute ones at the end, where the MLM head needs them: the
states H entering the last block become keys and values, the queries are H + P (P a learned table
of absolute positions), and the last block's weights run `steps` times, each step's output the
next step's queries. Fine-tuning drops the decoder and reads the encoder's own last states.

A model that adds absolute positions at its input (`position_biased_input`, DeBERTa-v2) has no EMD:
its MLM head reads the last states, as in Microsoft's code.
"""

import torch
from torch import nn

from lmlab.models.deberta.model import DebertaEncoder
from lmlab.modules.positions import LearnedPositions

STEPS = 2  # passes of the last block, as in Microsoft's DeBERTa


class EnhancedMaskDecoder(nn.Module):
    """(encoder, its inputs) -> the states the MLM head reads (B, T, d_model), zeros at padding."""

    def __init__(self, max_len: int, d_model: int, steps: int = STEPS):
        super().__init__()
        self.positions = LearnedPositions(max_len, d_model)
        self.steps = steps

    def forward(self, encoder: DebertaEncoder, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        hidden, layout, relative = encoder.run(input_ids, attention_mask, token_type_ids, len(encoder.blocks) - 1)
        positions = self.positions(torch.arange(input_ids.size(1), device=input_ids.device))  # (T, C)
        queries = hidden + layout.pack(positions.expand(input_ids.size(0), -1, -1))  # (N, C)
        last = encoder.blocks[-1]
        for _ in range(self.steps):
            queries = last(queries, layout, relative, hidden)  # keys and values from H, queries from the last step
        return layout.unpack(queries)
