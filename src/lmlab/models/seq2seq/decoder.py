"""The decoder: a GRU over the previous output characters, attention over the source, a softmax.

One step t (all steps at once under teacher forcing, where y_{t-1} is the reference):
    s_t = GRU(embed(y_{t-1}), s_{t-1})            s_0 = tanh(W_init summary)
    c_t, a_t = attention(s_t, memory, mask)       context and weights over source positions
    o_t = tanh(W_o [s_t; c_t])                    the attentional state
    p(y_t | y_<t, x) = softmax(W_out o_t)
The decoder attends with its current state (Luong's order) for every kind of score, so the
attention variants differ only in their score function.
"""

import torch
from torch import nn


class Decoder(nn.Module):
    """Target ids (B, T) and decoder state -> logits (B, T, V), the new state, weights (B, T, S) or None."""

    def __init__(self, vocab_size: int, embed_dim: int, hidden: int, attention: nn.Module, dropout: float,
                 pad_id: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.init_state = nn.Linear(hidden, hidden)
        self.rnn = nn.GRU(embed_dim, hidden, batch_first=True)
        self.attention = attention
        self.combine = nn.Linear(hidden + attention.context_dim, hidden)
        self.out = nn.Linear(hidden, vocab_size)
        self.dropout = nn.Dropout(dropout)

    def initial_state(self, summary: torch.Tensor) -> torch.Tensor:
        """The GRU state (1, B, H) before the first output, from the encoder's summary (B, H)."""
        return torch.tanh(self.init_state(summary))[None]

    def forward(self, tgt: torch.Tensor, state: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor):
        states, state = self.rnn(self.dropout(self.embedding(tgt)), state)  # (B, T, H), (1, B, H)
        context, weights = self.attention(states, memory, mask)  # (B, T, C), (B, T, S) or None
        attentional = torch.tanh(self.combine(torch.cat([states, context], dim=-1)))  # (B, T, H)
        return self.out(self.dropout(attentional)), state, weights  # (B, T, V)
