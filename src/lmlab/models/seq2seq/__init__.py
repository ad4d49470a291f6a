"""RNN encoder-decoder with additive, multiplicative, dot or no attention."""

from lmlab.models.seq2seq.config import ATTENTION_KINDS, Seq2SeqConfig
from lmlab.models.seq2seq.model import Encoded, Seq2Seq, build_seq2seq

__all__ = ["ATTENTION_KINDS", "Encoded", "Seq2Seq", "Seq2SeqConfig", "build_seq2seq"]
