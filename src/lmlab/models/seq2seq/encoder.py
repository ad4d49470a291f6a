"""The encoder: character embeddings read by a bidirectional GRU."""

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class Encoder(nn.Module):
    """Source ids -> one state per position (both directions) and a summary for the decoder's start."""

    def __init__(self, vocab_size: int, embed_dim: int, hidden: int, dropout: float, pad_id: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(embed_dim, hidden // 2, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) right-padded ids, mask (B, S) True on real tokens -> memory (B, S, H), summary (B, H).

        Packing makes each direction stop at its row's last real token, so padding changes nothing:
        the backward direction starts at the true end, and the summary is (forward last, backward first).
        """
        lengths = mask.sum(dim=1).cpu()  # (B,)
        packed = pack_padded_sequence(self.dropout(self.embedding(src)), lengths, batch_first=True,
                                      enforce_sorted=False)
        out, last = self.rnn(packed)  # last (2, B, H/2): the final state of each direction
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))  # (B, S, H)
        return self.dropout(memory), torch.cat([last[0], last[1]], dim=-1)  # (B, H)
