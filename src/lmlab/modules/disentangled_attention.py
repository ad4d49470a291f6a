"""DeBERTa's disentangled self-attention: content and relative position enter the scores apart.

A BERT token's vector is its content plus its absolute position, mixed before any attention. DeBERTa
keeps them apart: content vectors H flow through the layers, and one table of relative position
vectors P (`modules.relative_position.RelativeEmbeddings`, shared by the layers) is projected by each
layer into position keys K_r and queries Q_r. The score of query i on key j sums three terms,

    content-to-content   Q_i . K_j
    content-to-position  Q_i . K_r[d(i, j)]      (c2p: what i looks for at that distance)
    position-to-content  K_j . Q_r[d(i, j)]      (p2c: what j offers to a query at that distance)

with d(i, j) the bucket of i - j, all divided by sqrt(head_dim * number of terms). The position
projections are the layer's own (`pos_key`, `pos_query`) or, with `share_att_key`, its content key
and query projections. Which of c2p and p2c a model uses is its `terms`.
"""

import math

import torch
import torch.nn.functional as F

from lmlab.modules.attention import attend
from lmlab.modules.unpadding import UnpaddedSelfAttention, Unpadding

TERMS = ("c2p", "p2c")


class DisentangledSelfAttention(UnpaddedSelfAttention):
    """Bidirectional disentangled attention over packed tokens: x (N, C), an `Unpadding` and the relative
    position rows and index (`RelativeEmbeddings(T)`) -> (N, C).

    The content weights and their names are `SelfAttention`'s (fused `qkv`, `out`); the position
    projections are `pos_key` (c2p) and `pos_query` (p2c), absent with `share_att_key`. Attention
    runs over the padded (B, T) layout in one call, padded keys masked; `weights` (B, H, T, T) holds
    the map when `need_weights` is set.
    """

    def __init__(self, d_model: int, n_heads: int, terms: tuple[str, ...], share_att_key: bool,
                 dropout: float = 0.0):
        super().__init__(d_model, n_heads, bias=True, dropout=dropout,
                         scale=1 / math.sqrt(d_model // n_heads * (1 + len(terms))))
        assert set(terms) <= set(TERMS), terms
        self.terms, self.share_att_key = terms, share_att_key
        self.pos_key = torch.nn.Linear(d_model, d_model) if "c2p" in terms and not share_att_key else None
        self.pos_query = torch.nn.Linear(d_model, d_model) if "p2c" in terms and not share_att_key else None

    def forward(self, x: torch.Tensor, layout: Unpadding, relative: tuple[torch.Tensor, torch.Tensor],
                memory: torch.Tensor | None = None) -> torch.Tensor:
        """x (N, C) -> (N, C). `relative` takes the place of a decoder's rotary positions (computed once per
        pass, handed to every layer), `memory` that of its KV cache: when given (N, C), the keys and
        values come from it and only the queries from x (the enhanced mask decoder's queries)."""
        self.check_map_exists()
        C = x.size(1)
        if memory is None:
            qkv = self.qkv(x)  # (N, 3C)
        else:
            q_weight, kv_weight = self.qkv.weight.split([C, 2 * C])
            q_bias, kv_bias = self.qkv.bias.split([C, 2 * C])
            qkv = torch.cat([F.linear(x, q_weight, q_bias), F.linear(memory, kv_weight, kv_bias)], dim=-1)
        q, k, v = layout.unpack(qkv.view(-1, 3 * self.n_heads, self.head_dim)).transpose(1, 2).chunk(3, dim=1)
        scores = self.position_scores(q, k, *relative)  # (B, H, T, T)
        if layout.indices is not None:
            real = layout.unpack(x.new_ones(x.size(0), dtype=torch.bool))  # (B, T)
            scores = scores.masked_fill(~real[:, None, None, :], float("-inf"))  # padded keys
        y, self.weights = attend(q, k, v, scores, dropout_p=self.dropout if self.training else 0.0,
                                 need_weights=self.need_weights, scale=self.scale)
        return self.out(layout.pack(y.transpose(1, 2)).flatten(1))  # (B, T, H, D) -> (N, H D) -> (N, C)

    def position_scores(self, q: torch.Tensor, k: torch.Tensor, rows: torch.Tensor, index: torch.Tensor
                        ) -> torch.Tensor:
        """The c2p and p2c terms, scaled: q, k (B, H, T, D), relative rows (R, C), index (T, T) -> (B, H, T, T)."""
        B, H, T, D = q.shape
        rows = F.dropout(rows, self.dropout, self.training)
        if self.share_att_key:
            pos_query, pos_key = F.linear(rows, self.qkv.weight[:2 * H * D], self.qkv.bias[:2 * H * D]).chunk(2, -1)
        else:
            pos_query = self.pos_query(rows) if self.pos_query is not None else None
            pos_key = self.pos_key(rows) if self.pos_key is not None else None
        scores = q.new_zeros(B, H, T, T)
        if "c2p" in self.terms:
            by_row = q @ pos_key.view(-1, H, D).permute(1, 2, 0)  # (B, H, T, D) @ (H, D, R) -> (B, H, T, R)
            scores = scores + by_row.gather(-1, index.expand(B, H, T, T))  # [i, j]: Q_i . K_r[d(i, j)]
        if "p2c" in self.terms:
            by_row = k @ pos_query.view(-1, H, D).permute(1, 2, 0)  # keys against position queries (B, H, T, R)
            # row j of the gather is key j against every query's offset; transposed, [i, j] = K_j . Q_r[d(i, j)]
            scores = scores + by_row.gather(-1, index.T.expand(B, H, T, T)).transpose(-1, -2)
        return scores * self.scale
