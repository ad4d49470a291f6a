"""A six-word word-level tokenizer (HF tokenizers) for tiny encoder-decoders."""

from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from tokenizers import Tokenizer


def word_tokenizer() -> Tokenizer:
    """<pad>=0, </s>=1, <unk>=2, then "the cat sat", split on whitespace."""
    words = ["<pad>", "</s>", "<unk>", "the", "cat", "sat"]
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = Whitespace()
    return tokenizer
