"""A character vocabulary with the four special tokens sequence-to-sequence models need.

<pad> fills a batch's short rows, <s> starts the decoder, </s> ends a sequence, <unk> stands for a
character the training data never showed. Ids 0-3 are the specials, then characters in sorted order.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from lmlab.errors import LmlabError

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


@dataclass(frozen=True)
class CharVocab:
    """Characters <-> ids; `chars` are the non-special tokens, in id order from 4."""

    chars: tuple[str, ...]

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> "CharVocab":
        """Every character of `texts`, sorted."""
        return cls(tuple(sorted(set("".join(texts)))))

    def __len__(self) -> int:
        return len(SPECIALS) + len(self.chars)

    @property
    def index(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.chars, start=len(SPECIALS))}

    def token(self, i: int) -> str:
        """The character (or special token's name) of id `i`."""
        return SPECIALS[i] if i < len(SPECIALS) else self.chars[i - len(SPECIALS)]

    def encode(self, text: str, eos: bool = True) -> list[int]:
        """The ids of `text`'s characters (<unk> for unseen ones), then </s> when `eos`."""
        index = self.index
        return [index.get(c, UNK) for c in text] + ([EOS] if eos else [])

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids` up to the first </s>; other specials are dropped."""
        chars = []
        for i in ids:
            if i == EOS:
                break
            if i >= len(SPECIALS):
                chars.append(self.chars[i - len(SPECIALS)])
        return "".join(chars)

    def check(self, text: str, what: str = "text") -> None:
        """Refuse empty `text` or text with characters this vocabulary lacks, naming them."""
        if not text:
            raise LmlabError(f"the {what} is empty; pass some characters")
        unknown = sorted(set(text) - set(self.chars))
        if unknown:
            raise LmlabError(f"the {what} has characters the model never saw: {''.join(unknown)!r}; "
                             f"use only {''.join(self.chars)!r}")
