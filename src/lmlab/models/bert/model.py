"""The BERT encoder: embeddings -> post-norm blocks with bidirectional attention (-> [CLS] pooler).

Unlike a decoder, every token sees every other real token of its sequence, left and right. The
blocks are lmlab's `PostNormBlock`s, so the encoder shares its feed-forward and attention code
with the decoders. They run on the real tokens only, packed as (N, d_model) (modules/unpadding.py):
a batch of mixed-length sentences is mostly padding, and no projection, feed-forward, norm or
attention score is spent on it. The hidden states at padded positions are zeros.
"""

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.models.bert.embeddings import BertEmbeddings
from lmlab.modules.pooling import ClsPooler
from lmlab.modules.unpadding import Unpadding


class BertEncoder(nn.Module):
    """input_ids (B, T) -> hidden states (B, T, d_model); `pooled` gives BERT's [CLS] vector (B, d_model)."""

    def __init__(self, embeddings: BertEmbeddings, blocks: list[nn.Module], pooler: ClsPooler | None = None):
        super().__init__()
        self.embeddings = embeddings
        self.blocks = nn.ModuleList(blocks)
        self.pooler = pooler

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The last hidden states (B, T, d_model), zeros at padding. attention_mask (B, T): 1 = real, 0 = padding."""
        layout = Unpadding.of(attention_mask, *input_ids.shape)
        x = layout.pack(self.embeddings(input_ids, token_type_ids))  # (B, T, C) -> (N, C): real tokens only
        for block in self.blocks:
            x = block(x, layout)
        return layout.unpack(x)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """tanh(W h_[CLS] + b): (B, d_model), the sentence-level output BERT's NSP head reads."""
        if self.pooler is None:
            raise LmlabError("this encoder has no pooler (its config says pooler=False; the checkpoint had none)")
        return self.pooler(self(input_ids, attention_mask, token_type_ids))
