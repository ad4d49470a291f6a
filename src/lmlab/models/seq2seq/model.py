"""An RNN encoder-decoder (Cho et al. 2014; Bahdanau et al. 2015; Luong et al. 2015), built by composition:
the attention module is passed in, so every variant is the same network around a different score."""

from dataclasses import dataclass

import torch
from torch import nn

from lmlab.models.seq2seq.attention import build_attention
from lmlab.models.seq2seq.config import Seq2SeqConfig
from lmlab.models.seq2seq.decoder import Decoder
from lmlab.models.seq2seq.encoder import Encoder


@dataclass(frozen=True)
class Encoded:
    """What decoding needs of a source batch: its states, their padding mask, the decoder's start."""

    memory: torch.Tensor  # (B, S, H)
    mask: torch.Tensor  # (B, S) True on real tokens
    state: torch.Tensor  # (1, B, H) initial decoder state

    def take(self, rows: torch.Tensor) -> "Encoded":
        """The batch made of rows `rows` (R,) of this one, e.g. one copy of a source per beam."""
        return Encoded(self.memory[rows], self.mask[rows], self.state[:, rows])


class Seq2Seq(nn.Module):
    """encoder + decoder; `forward` is the teacher-forced pass training uses."""

    def __init__(self, config: Seq2SeqConfig, encoder: Encoder, decoder: Decoder):
        super().__init__()
        self.config = config
        self.encoder = encoder
        self.decoder = decoder

    def encode(self, src: torch.Tensor) -> Encoded:
        """src (B, S) right-padded with pad_id -> the encoded batch."""
        mask = src != self.config.pad_id  # (B, S)
        memory, summary = self.encoder(src, mask)
        return Encoded(memory, mask, self.decoder.initial_state(summary))

    def decode(self, tgt: torch.Tensor, encoded: Encoded, state: torch.Tensor | None = None):
        """Read tgt (B, T) after `state` (the start by default) -> logits (B, T, V), state (1, B, H),
        attention weights (B, T, S) or None."""
        state = encoded.state if state is None else state
        return self.decoder(tgt, state, encoded.memory, encoded.mask)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: logits (B, T, V) for every next character, given the reference prefix tgt_in (B, T)."""
        return self.decode(tgt_in, self.encode(src))[0]


def build_seq2seq(config: Seq2SeqConfig) -> Seq2Seq:
    """The network of `config`, freshly initialised (seed torch first for reproducible weights)."""
    attention = build_attention(config.attention, config.hidden, config.attention_dim)
    encoder = Encoder(config.src_vocab_size, config.embed_dim, config.hidden, config.dropout, config.pad_id)
    decoder = Decoder(config.tgt_vocab_size, config.embed_dim, config.hidden, attention, config.dropout, config.pad_id)
    return Seq2Seq(config, encoder, decoder)
