"""The ALBERT encoder: factorised embeddings, then ONE block applied n_layers times (-> pooler).

Sharing the block's weights across depth makes the parameter count independent of the number
of layers (ALBERT-base: 12M parameters against BERT-base's 110M); the compute is the same as an
unshared stack of that depth. Inputs and outputs are those of `BertEncoder`.
"""

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.models.bert.embeddings import FactorizedEmbeddings
from lmlab.modules.pooling import ClsPooler
from lmlab.modules.unpadding import Unpadding


class AlbertEncoder(nn.Module):
    """input_ids (B, T) -> hidden states (B, T, d_model); `pooled` gives the [CLS] vector (B, d_model)."""

    def __init__(self, embeddings: FactorizedEmbeddings, block: nn.Module, n_layers: int,
                 pooler: ClsPooler | None = None):
        super().__init__()
        self.embeddings = embeddings
        self.block = block
        self.n_layers = n_layers
        self.pooler = pooler

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The last hidden states (B, T, d_model), zeros at padding. attention_mask (B, T): 1 = real, 0 = padding."""
        layout = Unpadding.of(attention_mask, *input_ids.shape)
        x = layout.pack(self.embeddings(input_ids, token_type_ids))  # (B, T, C) -> (N, C): real tokens only
        for _ in range(self.n_layers):
            x = self.block(x, layout)  # the same weights at every depth
        return layout.unpack(x)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """tanh(W h_[CLS] + b): (B, d_model), what the sentence-order head reads."""
        if self.pooler is None:
            raise LmlabError("this encoder has no pooler (its config says pooler=False; the checkpoint had none)")
        return self.pooler(self(input_ids, attention_mask, token_type_ids))
