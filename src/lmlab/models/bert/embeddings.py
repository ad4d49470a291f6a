"""BERT's input embeddings: token + learned position + token type (segment), then LayerNorm."""

import torch
from torch import nn

from lmlab.modules.norms import LayerNorm
from lmlab.modules.positions import LearnedPositions


class BertEmbeddings(nn.Module):
    """x_t = LayerNorm(E_token[w_t] + E_pos[t] + E_type[s_t]), then dropout.

    The token type s_t says which sentence of a pair token t belongs to (0 = first, 1 = second),
    so one sequence "[CLS] A [SEP] B [SEP]" can carry two sentences.
    """

    def __init__(self, vocab_size: int, max_len: int, type_vocab_size: int, d_model: int, eps: float,
                 dropout: float = 0.0):
        super().__init__()
        # an empty weight skips nn.Embedding's own init: the builder initialises, or a load assigns
        self.token = nn.Embedding(vocab_size, d_model, _weight=torch.empty(vocab_size, d_model))
        self.positions = LearnedPositions(max_len, d_model)
        self.token_type = nn.Embedding(type_vocab_size, d_model)
        self.norm = LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids, token_type_ids (B, T) -> (B, T, d_model); token types default to all 0."""
        T = input_ids.size(1)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(T, device=input_ids.device)  # (T,): absolute, padding is on the right
        x = self.token(input_ids) + self.positions(positions) + self.token_type(token_type_ids)  # (B, T, C)
        return self.dropout(self.norm(x))


class FactorizedEmbeddings(BertEmbeddings):
    """BERT's embeddings in a narrow width E, projected to d_model (ALBERT, ELECTRA): x_t = W e_t + b.

    A vocabulary of V tokens costs V*E + E*d_model weights instead of V*d_model: with V = 30k,
    E = 128 and d_model = 768 that is 4M instead of 23M. Token embeddings only need to be
    context-free lookups; the blocks, which stay d_model wide, make them contextual.
    """

    def __init__(self, vocab_size: int, max_len: int, type_vocab_size: int, embedding_size: int, d_model: int,
                 eps: float, dropout: float = 0.0):
        super().__init__(vocab_size, max_len, type_vocab_size, embedding_size, eps, dropout)
        self.project = nn.Linear(embedding_size, d_model)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids, token_type_ids (B, T) -> (B, T, d_model)."""
        return self.project(super().forward(input_ids, token_type_ids))  # (B, T, E) -> (B, T, C)
