"""Token classification: one tag per word, e.g. named entities in BIO form.

Every position's hidden state goes (after dropout) through Linear(d_model, n_tags). Words are
split into sub-tokens ("Nairobi" -> "nai", "##ro", "##bi"), but a tag belongs to a word: as in
BERT's CoNLL-2003 set-up, only a word's first sub-token is trained and read, the others (and the
special tokens) get the ignore index, so the loss and the predictions count each word once.
"""

import torch
from torch import nn


class TokenClassifier(nn.Module):
    """Dropout and Linear(d_model, n_tags): hidden states (B, T, d_model) -> logits (B, T, n_tags)."""

    reads = "hidden"  # what EncoderWithHead feeds it: the encoder's last hidden states

    def __init__(self, d_model: int, n_tags: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, n_tags)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(hidden))  # (B, T, n_tags)
