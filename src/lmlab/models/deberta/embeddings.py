"""DeBERTa's input embeddings: the token's content only, unless the model also adds absolute positions.

DeBERTa-v3 (`position_biased_input` False) feeds the blocks content alone: positions enter through
the relative position terms of attention, and absolute ones only in the enhanced mask decoder
(`models.deberta.mask_decoder`). DeBERTa-v2 models add BERT's learned absolute positions here too.
Token types exist only when `type_vocab_size` > 0 (v3 has none).
"""

import torch
from torch import nn

from lmlab.modules.norms import LayerNorm
from lmlab.modules.positions import LearnedPositions


class DebertaEmbeddings(nn.Module):
    """x_t = LayerNorm(E_token[w_t] (+ E_pos[t]) (+ E_type[s_t])), then dropout: (B, T) -> (B, T, d_model)."""

    def __init__(self, vocab_size: int, max_len: int, type_vocab_size: int, d_model: int, eps: float,
                 position_biased_input: bool, dropout: float = 0.0):
        super().__init__()
        # an empty weight skips nn.Embedding's own init: the builder initialises, or a load assigns
        self.token = nn.Embedding(vocab_size, d_model, _weight=torch.empty(vocab_size, d_model))
        self.positions = LearnedPositions(max_len, d_model) if position_biased_input else None
        self.token_type = nn.Embedding(type_vocab_size, d_model) if type_vocab_size > 0 else None
        self.norm = LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids, token_type_ids (B, T) -> (B, T, d_model); token types default to all 0."""
        x = self.token(input_ids)  # (B, T, C)
        if self.positions is not None:
            x = x + self.positions(torch.arange(input_ids.size(1), device=input_ids.device))
        if self.token_type is not None:
            x = x + self.token_type(torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids)
        return self.dropout(self.norm(x))
