"""Transformer blocks and the decoder-only stack.

A block is attention + feed-forward + two norms + residuals; where the norms sit is the variant:
`PreNormBlock` (GPT-2, Llama: x + f(norm(x))) or `PostNormBlock` (original Transformer, BERT:
norm(x + f(x))). Both take the same arguments, so a builder picks one by composition.
"""

import torch
from torch import nn

from lmlab.modules.attention import decoder_mask
from lmlab.modules.kv_cache import KVCache, LayerKV


class PreNormBlock(nn.Module):
    def __init__(self, attention: nn.Module, feed_forward: nn.Module, norm1: nn.Module, norm2: nn.Module,
                 dropout: float = 0.0):
        super().__init__()
        self.attention, self.feed_forward = attention, feed_forward
        self.norm1, self.norm2 = norm1, norm2
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rope=None,
                kv_cache: LayerKV | None = None) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.norm1(x), mask, rope, kv_cache))
        return x + self.dropout(self.feed_forward(self.norm2(x)))


class PostNormBlock(PreNormBlock):
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rope=None,
                kv_cache: LayerKV | None = None) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, mask, rope, kv_cache)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class TransformerDecoder(nn.Module):
    """Token embedding (+ additive positions) -> blocks -> final norm -> LM head -> logits.

    `positions` is an additive position module (learned, sinusoidal) or None; `rotary` a
    RotaryEmbedding applied inside attention, or None. With `tie_embeddings` the LM head reuses
    the token embedding matrix.
    """

    def __init__(self, token_embedding: nn.Embedding, blocks: list[nn.Module], norm: nn.Module,
                 lm_head: nn.Linear, positions: nn.Module | None = None, rotary: nn.Module | None = None,
                 dropout: float = 0.0):
        super().__init__()
        self.token_embedding = token_embedding
        self.positions = positions
        self.rotary = rotary
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm
        self.lm_head = lm_head
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, kv_cache: KVCache | None = None) -> torch.Tensor:
        """input_ids (B, T) -> logits (B, T, vocab).

        attention_mask (B, S) covers the cached positions and the new ones (1 = real token);
        positions (B, T) defaults to counting real tokens, so left padding is harmless.
        """
        x = self.hidden_states(input_ids, attention_mask, positions, kv_cache)
        return self.lm_head(x)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      positions: torch.Tensor | None = None, kv_cache: KVCache | None = None) -> torch.Tensor:
        """The final-norm hidden states (B, T, d_model) that the LM head reads."""
        B, T = input_ids.shape
        start = kv_cache.length if kv_cache is not None else 0
        if positions is None:
            positions = default_positions(attention_mask, start, T, input_ids.device)
        mask = decoder_mask(attention_mask, T, start + T, input_ids.device)
        return self.run_stack(input_ids, positions, mask, kv_cache)

    def run_stack(self, input_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                  kv_cache=None) -> torch.Tensor:
        """The final-norm hidden states (B, T, d_model) for given positions (B, T) or (T,) and a ready
        attention mask (B or 1, 1, T, S) or None (see `decoder_mask`). `hidden_states` derives both from
        a padding mask; a caller whose rows each sit at their own place in a cache (the serving engine's
        slots, `lmlab.inference.slots`) builds them itself. kv_cache: anything with `layer(i)` and `advance(T)`."""
        x = self.token_embedding(input_ids)  # (B, T, C)
        if self.positions is not None:
            x = x + self.positions(positions)
        x = self.dropout(x)
        rope = self.rotary(positions) if self.rotary is not None else None
        for i, block in enumerate(self.blocks):
            x = block(x, mask, rope, kv_cache.layer(i) if kv_cache is not None else None)
        if kv_cache is not None:
            kv_cache.advance(input_ids.size(1))
        return self.norm(x)


def default_positions(attention_mask: torch.Tensor | None, start: int, T: int,
                      device: torch.device) -> torch.Tensor:
    """Positions of the T new tokens: start..start+T-1, or, with a padding mask (B, S), the
    number of real tokens before each one (so a left-padded prompt starts at position 0)."""
    if attention_mask is None:
        return torch.arange(start, start + T, device=device)  # (T,)
    counted = attention_mask.long().cumsum(-1) - 1  # (B, S)
    return counted.clamp(min=0)[:, -T:]  # (B, T)
