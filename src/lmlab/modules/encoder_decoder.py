"""The two stacks of an encoder-decoder transformer and the decoder block that joins them.

The encoder is embeddings -> blocks with bidirectional self-attention (lmlab's `PreNormBlock` /
`PostNormBlock`, as in BERT) -> final norm. The decoder block adds cross-attention between the
causal self-attention and the feed-forward: each target position reads the encoder's output.
What differs between the original Transformer, T5 and BART is only which parts fill these slots
(positions added to the embeddings or a relative bias added to the scores, pre- or post-norm,
the norm and the feed-forward), so the families share every line of the forward pass.
"""

import torch
from torch import nn

from lmlab.modules.attention import causal_mask, decoder_mask
from lmlab.modules.kv_cache import KVCache, LayerKV
from lmlab.modules.transformer import default_positions
from lmlab.modules.unpadding import Unpadding

MemoryKV = tuple[torch.Tensor, torch.Tensor]  # one decoder layer's cross-attention keys, values (B, H, S, D)


class SequenceEmbeddings(nn.Module):
    """token embedding * scale (+ positions) (-> norm) -> dropout: (B, T) ids -> (B, T, C).

    The token embedding is the model's shared table (source, target and LM head). `scale` is
    sqrt(d_model) in the original Transformer, 1 elsewhere; `norm` is BART's embedding LayerNorm.
    """

    def __init__(self, token_embedding: nn.Embedding, positions: nn.Module | None = None, scale: float = 1.0,
                 norm: nn.Module | None = None, dropout: float = 0.0):
        super().__init__()
        self.token_embedding = token_embedding
        self.positions = positions
        self.scale = scale
        self.norm = norm if norm is not None else nn.Identity()
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(input_ids) * self.scale  # (B, T, C)
        if self.positions is not None:
            x = x + self.positions(positions)
        return self.dropout(self.norm(x))


class PreNormDecoderBlock(nn.Module):
    """x + self_attn(norm(x)); x + cross_attn(norm(x), memory); x + ffn(norm(x)) (T5)."""

    def __init__(self, self_attention: nn.Module, cross_attention: nn.Module, feed_forward: nn.Module,
                 norm1: nn.Module, norm2: nn.Module, norm3: nn.Module, dropout: float = 0.0):
        super().__init__()
        self.self_attention, self.cross_attention, self.feed_forward = self_attention, cross_attention, feed_forward
        self.norm1, self.norm2, self.norm3 = norm1, norm2, norm3
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, memory: torch.Tensor | MemoryKV,
                memory_mask: torch.Tensor | None, kv_cache: LayerKV | None = None) -> torch.Tensor:
        x = x + self.dropout(self.self_attention(self.norm1(x), mask, None, kv_cache))
        x = x + self.dropout(self.cross_attention(self.norm2(x), memory, memory_mask))
        return x + self.dropout(self.feed_forward(self.norm3(x)))


class PostNormDecoderBlock(PreNormDecoderBlock):
    """norm(x + self_attn(x)); norm(x + cross_attn(x, memory)); norm(x + ffn(x)) (Transformer, BART)."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, memory: torch.Tensor | MemoryKV,
                memory_mask: torch.Tensor | None, kv_cache: LayerKV | None = None) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.self_attention(x, mask, None, kv_cache)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, memory, memory_mask)))
        return self.norm3(x + self.dropout(self.feed_forward(x)))


def with_bias(bias: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """A float attention mask: the position bias (1, H, T, S) plus -inf where the bool `mask`
    (B or 1, 1, T or 1, S) forbids a key (no mask: every key allowed)."""
    if mask is None:
        return bias
    return bias.masked_fill(~mask, float("-inf"))


class Stack(nn.Module):
    """The parts both stacks hold: embeddings -> blocks -> final norm (Identity in post-norm models)."""

    def __init__(self, embeddings: SequenceEmbeddings, blocks: list[nn.Module], norm: nn.Module,
                 position_bias: nn.Module | None = None):
        super().__init__()
        self.embeddings = embeddings
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm
        self.position_bias = position_bias  # T5's RelativePositionBias, shared by every layer


class EncoderStack(Stack):
    """input_ids (B, S) -> the memory (B, S, C) the decoder reads; every token sees every real token.

    The blocks run on the real tokens only, packed as (N, C) (modules/unpadding.py, with
    `UnpaddedSelfAttention`): a batch of sources of mixed length is partly padding, and no
    projection, feed-forward, norm or attention score is spent on it. The memory is zeros at
    padding, which the decoder's cross-attention masks anyway.
    """

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """attention_mask (B, S): 1 on real tokens, 0 on padding."""
        S = input_ids.size(1)
        positions = torch.arange(S, device=input_ids.device)
        layout = Unpadding.of(attention_mask, *input_ids.shape)
        if self.position_bias is not None:
            layout = layout.with_score_bias(self.position_bias(positions, positions))  # (1, H, S, S)
        x = layout.pack(self.embeddings(input_ids, positions))  # (B, S, C) -> (N, C): real tokens only
        for block in self.blocks:
            x = block(x, layout)
        return layout.unpack(self.norm(x))  # (B, S, C)


class DecoderStack(Stack):
    """Target ids (B, T) + the encoder's memory -> hidden states (B, T, C) for the LM head.

    With a `kv_cache` the ids are the next T tokens after the cached ones (decoding one at a
    time); `memory` is the encoder output (B, S, C) or, when decoding, each layer's precomputed
    cross-attention keys and values (`memory_kv`), so the memory is projected once per source.
    """

    def memory_kv(self, memory: torch.Tensor) -> list[MemoryKV]:
        """Every layer's cross-attention keys and values of `memory` (B, S, C)."""
        return [block.cross_attention.memory_kv(memory) for block in self.blocks]

    def forward(self, input_ids: torch.Tensor, memory: torch.Tensor | list[MemoryKV],
                memory_mask: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                kv_cache: KVCache | None = None) -> torch.Tensor:
        """memory_mask (B, S): 1 on real source tokens; attention_mask (B, cached + T) over the targets."""
        B, T = input_ids.shape
        device = input_ids.device
        start = kv_cache.length if kv_cache is not None else 0
        x = self.embeddings(input_ids, default_positions(attention_mask, start, T, device))  # (B, T, C)
        mask = decoder_mask(attention_mask, T, start + T, device)  # (B or 1, 1, T, S) or None
        if self.position_bias is not None:
            if mask is None and T > 1:
                mask = causal_mask(T, start + T, device)  # (1, 1, T, S)
            mask = with_bias(self.position_bias(torch.arange(start, start + T, device=device),
                                                torch.arange(start + T, device=device)), mask)
        cross_mask = None if memory_mask is None else memory_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
        layer_memory = memory if isinstance(memory, list) else [memory] * len(self.blocks)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, layer_memory[i], cross_mask, kv_cache.layer(i) if kv_cache is not None else None)
        if kv_cache is not None:
            kv_cache.advance(T)
        return self.norm(x)
