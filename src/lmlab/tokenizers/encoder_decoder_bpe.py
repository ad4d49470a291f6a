"""Byte-level BPE for encoder-decoders trained from scratch, with each family's own special tokens.

T5 has <pad> </s> <unk>, BART <s> <pad> </s> <unk> <mask>, the original Transformer <pad> </s>
<unk>. A pre-training objective brings the tokens it writes into its inputs as `extra`: T5's span
corruption its sentinels <extra_id_0..99>, BART's denoising <mask>. Special tokens are never
split by the tokenizer, nor merged with their neighbours. Digits are tokens of their own, so a
model reads and writes numbers digit by digit (as Llama's tokenizer does) instead of through
whichever digit groups happened to be frequent.
"""

from collections.abc import Iterable, Sequence

from lmlab.tokenizers.bpe import train_bpe
from tokenizers import Tokenizer

PAD, EOS, UNK, BOS, MASK = "<pad>", "</s>", "<unk>", "<s>", "<mask>"
FAMILY_SPECIALS = {"t5": (PAD, EOS, UNK), "bart": (BOS, PAD, EOS, UNK, MASK), "transformer": (PAD, EOS, UNK)}


def train_encoder_decoder_bpe(texts: Iterable[str], vocab_size: int, family: str,
                              extra: Sequence[str] = ()) -> Tokenizer:
    """A byte-level BPE of `vocab_size` tokens whose special tokens are `family`'s, then those of
    `extra` it lacks, in order (so T5's pad is 0 and </s> 1, BART's <pad> 1 and </s> 2, as in HF)."""
    specials = FAMILY_SPECIALS[family]
    return train_bpe(texts, vocab_size, (*specials, *(t for t in extra if t not in specials)), split_digits=True)
