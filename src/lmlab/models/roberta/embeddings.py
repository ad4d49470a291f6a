"""RoBERTa's input embeddings: BERT's, with positions counted as fairseq counts them.

fairseq reserves the first pad_token_id + 1 position rows: real tokens take positions
pad_token_id + 1, pad_token_id + 2, … in order, and padding takes position pad_token_id. So a
RoBERTa checkpoint with 514 position rows holds 512 tokens, and positions come from the ids.
"""

import torch

from lmlab.models.bert.embeddings import BertEmbeddings


def roberta_positions(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """input_ids (B, T) -> positions (B, T): pad_token_id + the count of real tokens up to and
    including each one, and pad_token_id itself at padding."""
    real = (input_ids != pad_token_id).long()  # (B, T)
    return torch.cumsum(real, dim=1) * real + pad_token_id


class RobertaEmbeddings(BertEmbeddings):
    """x_t = LayerNorm(E_token[w_t] + E_pos[p_t] + E_type[s_t]) with p_t from `roberta_positions`."""

    def __init__(self, vocab_size: int, max_len: int, type_vocab_size: int, d_model: int, eps: float,
                 pad_token_id: int, dropout: float = 0.0):
        super().__init__(vocab_size, max_len, type_vocab_size, d_model, eps, dropout)
        self.pad_token_id = pad_token_id

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids, token_type_ids (B, T) -> (B, T, d_model); token types default to all 0."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = roberta_positions(input_ids, self.pad_token_id)  # (B, T)
        x = self.token(input_ids) + self.positions(positions) + self.token_type(token_type_ids)  # (B, T, C)
        return self.dropout(self.norm(x))
