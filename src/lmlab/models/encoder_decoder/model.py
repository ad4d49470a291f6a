"""`EncoderDecoder`: shared embedding -> encoder stack -> decoder stack (with cross-attention) -> LM head.

The three calls follow the course's picture of an encoder-decoder transformer: `encode` reads the source
once; `decode` predicts target tokens from a target prefix and the encoded source; `forward` is
the teacher-forced pass training uses (decoder inputs = targets shifted right). Generation calls
`encode` once, `memory_kv` once, then `decode` one token at a time with a KV cache.
"""

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig
from lmlab.modules.encoder_decoder import DecoderStack, EncoderStack, MemoryKV
from lmlab.modules.kv_cache import KVCache


class EncoderDecoder(nn.Module):
    def __init__(self, config: EncoderDecoderConfig, shared: nn.Embedding, encoder: EncoderStack,
                 decoder: DecoderStack, lm_head: nn.Linear):
        super().__init__()
        self.config = config
        self.shared = shared
        self.encoder = encoder
        self.decoder = decoder
        self.lm_head = lm_head
        self.output_scale = config.d_model ** -0.5 if config.rescale_tied_logits else 1.0
        if config.logits_bias:
            self.register_buffer("logits_bias", torch.zeros(config.vocab_size))
        else:
            self.logits_bias = None

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Source ids (B, S) -> memory (B, S, C). attention_mask (B, S): 1 on real tokens."""
        if input_ids.size(1) > self.config.max_source_length:
            raise LmlabError(f"the source has {input_ids.size(1)} tokens but this model reads at most "
                             f"{self.config.max_source_length}; shorten or truncate it")
        return self.encoder(input_ids, attention_mask)

    def memory_kv(self, memory: torch.Tensor) -> list[MemoryKV]:
        """Every decoder layer's cross-attention keys and values of `memory`: computed once per source."""
        return self.decoder.memory_kv(memory)

    def decode(self, decoder_input_ids: torch.Tensor, memory: torch.Tensor | list[MemoryKV],
               attention_mask: torch.Tensor | None = None, decoder_attention_mask: torch.Tensor | None = None,
               kv_cache: KVCache | None = None) -> torch.Tensor:
        """Target ids (B, T) -> logits (B, T, V) for the next target token at every position.

        memory: `encode`'s output or its `memory_kv`; attention_mask: the source's (B, S);
        decoder_attention_mask: (B, cached + T) over the targets; kv_cache: the decoder's
        self-attention cache (see `new_cache`), advanced by T.
        """
        logits = self.lm_head(self.decoder_hidden(decoder_input_ids, memory, attention_mask,
                                                  decoder_attention_mask, kv_cache))  # (B, T, V)
        return logits if self.logits_bias is None else logits + self.logits_bias

    def decoder_hidden(self, decoder_input_ids: torch.Tensor, memory: torch.Tensor | list[MemoryKV],
                       attention_mask: torch.Tensor | None = None,
                       decoder_attention_mask: torch.Tensor | None = None,
                       kv_cache: KVCache | None = None) -> torch.Tensor:
        """What the LM head reads (B, T, C): the decoder's output, times d_model^-0.5 for T5's tied head.
        The arguments are `decode`'s."""
        start = kv_cache.length if kv_cache is not None else 0
        if start + decoder_input_ids.size(1) > self.config.max_target_length:
            raise LmlabError(f"the target reaches {start + decoder_input_ids.size(1)} tokens but this model "
                             f"decodes at most {self.config.max_target_length}; lower max_new_tokens")
        h = self.decoder(decoder_input_ids, memory, attention_mask, decoder_attention_mask, kv_cache)
        return h * self.output_scale

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                decoder_input_ids: torch.Tensor, decoder_attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher forcing: source (B, S) and shifted targets (B, T) -> logits (B, T, V)."""
        return self.decode(decoder_input_ids, self.encode(input_ids, attention_mask), attention_mask,
                           decoder_attention_mask)

    def new_cache(self, batch_size: int, max_len: int | None = None) -> KVCache:
        """An empty self-attention cache for the decoder, on the model's device and dtype."""
        cfg, weight = self.config, self.lm_head.weight
        return KVCache(cfg.n_decoder_layers, batch_size, cfg.n_heads, cfg.attention_head_dim,
                       max_len or cfg.max_target_length, weight.dtype, weight.device)
