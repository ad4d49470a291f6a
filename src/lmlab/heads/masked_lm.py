"""The masked-LM head of BERT-style encoders: from a hidden state back to a score per token.

    logits = LayerNorm(gelu(W h + b)) E^T + bias

E is the encoder's own token-embedding matrix (V, embedding width): the output layer is tied to the
input one, so only the transform, its norm and a per-token bias are the head's own weights. W maps
d_model to the embedding width (the same size for BERT and RoBERTa, narrower for ALBERT and ELECTRA).
"""

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.modules.norms import LayerNorm


class MaskedLMHead(nn.Module):
    """hidden (…, d_model) and the token embeddings (V, E) -> logits (…, V)."""

    def __init__(self, d_model: int, embedding_size: int, vocab_size: int, eps: float, approximate: str = "none"):
        super().__init__()
        self.dense = nn.Linear(d_model, embedding_size)
        self.norm = LayerNorm(embedding_size, eps=eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.approximate = approximate  # "none": exact GELU; "tanh": ALBERT's gelu_new

    def forward(self, hidden: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
        x = self.norm(F.gelu(self.dense(hidden), approximate=self.approximate))  # (…, E)
        return F.linear(x, embedding_weight, self.bias)  # (…, V)
