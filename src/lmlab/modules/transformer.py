"""Transformer blocks and the decoder-only stack.

A block is attention + feed-forward + norms + residuals; where the norms sit is the variant:
`PreNormBlock` (GPT-2, Llama: x + f(norm(x))) or `PostNormBlock` (original Transformer, BERT:
norm(x + f(x))). Both take the same arguments, so a builder picks one by composition. A pre-norm
block may also norm each sublayer's output inside the residual, x + post(f(pre(x))): with both
norms that is Gemma 2's "sandwich", with the pre-norm an identity OLMo 2's placement.
"""

import torch
from torch import nn

from lmlab.modules.attention import decoder_mask, windowed
from lmlab.modules.kv_cache import KVCache, LayerKV


class PreNormBlock(nn.Module):
    def __init__(self, attention: nn.Module, feed_forward: nn.Module, norm1: nn.Module, norm2: nn.Module,
                 dropout: float = 0.0, post_norm1: nn.Module | None = None, post_norm2: nn.Module | None = None):
        super().__init__()
        self.attention, self.feed_forward = attention, feed_forward
        self.norm1, self.norm2 = norm1, norm2
        self.post_norm1 = post_norm1 or nn.Identity()  # on the attention's output, inside the residual
        self.post_norm2 = post_norm2 or nn.Identity()  # on the feed-forward's output
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rope=None,
                kv_cache: LayerKV | None = None) -> torch.Tensor:
        x = x + self.dropout(self.post_norm1(self.attention(self.norm1(x), mask, rope, kv_cache)))
        return x + self.dropout(self.post_norm2(self.feed_forward(self.norm2(x))))


class PostNormBlock(PreNormBlock):
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rope=None,
                kv_cache: LayerKV | None = None) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, mask, rope, kv_cache)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class TransformerDecoder(nn.Module):
    """Token embedding (+ additive positions) -> blocks -> final norm -> LM head -> logits.

    `positions` is an additive position module (learned, sinusoidal) or None; `rotary` a
    RotaryEmbedding applied inside attention, or None. With `tie_embeddings` the LM head reuses
    the token embedding matrix. The settings of today's decoders: `embedding_scale` multiplies the
    token embeddings (Gemma: sqrt(d_model)); `logit_softcap` bounds the logits by cap * tanh(logit / cap)
    (Gemma 2); `windows[i]` is layer i's sliding window (None: it sees every key), and `local_rotary`
    the rotary table of the layers with a window, when theirs differs (Gemma 3).
    """

    def __init__(self, token_embedding: nn.Embedding, blocks: list[nn.Module], norm: nn.Module,
                 lm_head: nn.Linear, positions: nn.Module | None = None, rotary: nn.Module | None = None,
                 dropout: float = 0.0, embedding_scale: float = 1.0, logit_softcap: float | None = None,
                 windows: tuple[int | None, ...] = (), local_rotary: nn.Module | None = None):
        super().__init__()
        self.token_embedding = token_embedding
        self.positions = positions
        self.rotary = rotary
        self.local_rotary = local_rotary
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm
        self.lm_head = lm_head
        self.dropout = nn.Dropout(dropout)
        self.embedding_scale = embedding_scale
        self.logit_softcap = logit_softcap
        self.windows = windows or (None,) * len(blocks)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, kv_cache: KVCache | None = None) -> torch.Tensor:
        """input_ids (B, T) -> logits (B, T, vocab).

        attention_mask (B, S) covers the cached positions and the new ones (1 = real token);
        positions (B, T) defaults to counting real tokens, so left padding is harmless.
        """
        x = self.hidden_states(input_ids, attention_mask, positions, kv_cache)
        return self.logits(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head on final-norm hidden states (…, d_model) -> (…, vocab), soft-capped if the model caps."""
        logits = self.lm_head(hidden)
        if self.logit_softcap is not None:
            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        return logits

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
        if self.embedding_scale != 1.0:
            x = x * torch.tensor(self.embedding_scale, dtype=x.dtype)
        if self.positions is not None:
            x = x + self.positions(positions)
        x = self.dropout(x)
        rope = self.rotary(positions) if self.rotary is not None else None
        local_rope = self.local_rotary(positions) if self.local_rotary is not None else rope
        T = input_ids.size(1)
        S = (kv_cache.length if kv_cache is not None else 0) + T  # keys each layer reads
        masks = {window: windowed(mask, T, S, window, input_ids.device)
                 for window in set(self.windows) - {None}}  # window -> its band of the mask
        for i, block in enumerate(self.blocks):
            window = self.windows[i]
            x = block(x, mask if window is None else masks[window], rope if window is None else local_rope,
                      kv_cache.layer(i) if kv_cache is not None else None)
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
