"""The DeBERTa encoder: content embeddings -> post-norm blocks of disentangled attention (-> pooler).

The blocks are lmlab's `PostNormBlock`s with a `DisentangledSelfAttention` in place of BERT's, run
on the real tokens packed as (N, d_model) like every lmlab encoder. The relative position rows and
the offset -> row index are computed once per pass and handed to every block, where a decoder hands
its rotary angles. The hidden states at padded positions are zeros.
"""

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.models.deberta.embeddings import DebertaEmbeddings
from lmlab.modules.pooling import ClsPooler
from lmlab.modules.relative_position import RelativeEmbeddings
from lmlab.modules.unpadding import Unpadding


class DebertaEncoder(nn.Module):
    """input_ids (B, T) -> hidden states (B, T, d_model); `pooled` gives the [CLS] vector (B, d_model)."""

    def __init__(self, embeddings: DebertaEmbeddings, blocks: list[nn.Module], relative: RelativeEmbeddings,
                 pooler: ClsPooler | None = None):
        super().__init__()
        self.embeddings = embeddings
        self.relative = relative
        self.blocks = nn.ModuleList(blocks)
        self.pooler = pooler

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The last hidden states (B, T, d_model), zeros at padding. attention_mask (B, T): 1 = real, 0 = padding."""
        x, layout, _ = self.run(input_ids, attention_mask, token_type_ids, len(self.blocks))
        return layout.unpack(x)

    def run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, token_type_ids: torch.Tensor | None,
            n_blocks: int) -> tuple[torch.Tensor, Unpadding, tuple[torch.Tensor, torch.Tensor]]:
        """The packed states (N, d_model) after the first `n_blocks` blocks, their layout and the relative
        positions the blocks read (the enhanced mask decoder goes on from there)."""
        layout = Unpadding.of(attention_mask, *input_ids.shape)
        relative = self.relative(input_ids.size(1))  # rows (R, C), index (T, T)
        x = layout.pack(self.embeddings(input_ids, token_type_ids))  # (B, T, C) -> (N, C): real tokens only
        for block in self.blocks[:n_blocks]:
            x = block(x, layout, relative)
        return x, layout, relative

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """gelu(W h_[CLS] + b): (B, d_model), what DeBERTa's sequence-level heads read (`ContextPooler`)."""
        if self.pooler is None:
            raise LmlabError("this encoder has no pooler (its config says pooler=False; the checkpoint had none)")
        return self.pooler(self(input_ids, attention_mask, token_type_ids))
