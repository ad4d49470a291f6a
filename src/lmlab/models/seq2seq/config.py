"""The settings of an RNN encoder-decoder; saved with the model so it can be rebuilt."""

from dataclasses import dataclass

from lmlab.config_checks import MAX_VOCAB, MAX_WIDTH, at_most, check_types
from lmlab.errors import LmlabError

ATTENTION_KINDS = ("additive", "multiplicative", "dot", "none")


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Sizes of a bidirectional-GRU encoder and a GRU decoder with attention `attention`.

    The encoder runs hidden/2 units per direction, so its states (both directions concatenated)
    and the decoder's state have the same size `hidden`, which dot-product attention needs.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    embed_dim: int = 32
    hidden: int = 128
    attention: str = "additive"  # one of ATTENTION_KINDS
    attention_dim: int = 64  # additive attention's inner size (v^T tanh(W s + U h) has v of this size)
    dropout: float = 0.0
    pad_id: int = 0  # source and target padding; masked out of attention and of the encoder's reading
    bos_id: int = 1  # the decoder's first input
    eos_id: int = 2  # ends source and target

    def __post_init__(self):
        check_types(self)
        at_most(self, MAX_VOCAB, "src_vocab_size", "tgt_vocab_size")
        at_most(self, MAX_WIDTH, "embed_dim", "hidden", "attention_dim")
        if self.attention not in ATTENTION_KINDS:
            raise LmlabError(f"unknown attention '{self.attention}'; choose one of {', '.join(ATTENTION_KINDS)}")
        if self.hidden < 2 or self.hidden % 2:
            raise LmlabError(f"--hidden {self.hidden} must be an even number (half per encoder direction)")
        if min(self.src_vocab_size, self.tgt_vocab_size, self.embed_dim, self.attention_dim) < 1:
            raise LmlabError("vocabulary sizes, embed_dim and attention_dim must be at least 1")
        if not 0 <= self.dropout < 1:
            raise LmlabError(f"--dropout {self.dropout} must lie in [0, 1)")


# Named shapes, one per attention (`lmlab.preset`, `lmlab list --presets`): `lmlab seq2seq train`'s
# default sizes; the vocabularies become the task's characters at training time.
SEQ2SEQ_PRESETS: dict[str, Seq2SeqConfig] = {
    f"seq2seq-{attention}": Seq2SeqConfig(src_vocab_size=128, tgt_vocab_size=128, attention=attention)
    for attention in ATTENTION_KINDS
}
