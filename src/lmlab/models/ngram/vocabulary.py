"""A word-level vocabulary with the three words every ARPA file knows: `<unk>`, `<s>`, `</s>`.

BPE models use their tokenizer's ids instead; this is for counting whitespace-separated words, as
kenlm and SRILM do.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

UNK, BOS, EOS = "<unk>", "<s>", "</s>"


@dataclass(frozen=True)
class Vocabulary:
    words: tuple[str, ...]  # id -> word; ids 0, 1, 2 are <unk>, <s>, </s>

    unk_id = 0
    bos_id = 1
    eos_id = 2

    @classmethod
    def from_sentences(cls, sentences: Iterable[Sequence[str]]) -> "Vocabulary":
        """Every word of `sentences`, in order of first appearance, after the three markers."""
        seen = dict.fromkeys([UNK, BOS, EOS])
        for sentence in sentences:
            seen.update(dict.fromkeys(sentence))
        return cls(tuple(seen))

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, sentence: Sequence[str]) -> list[int]:
        """Ids of the words of `sentence`; a word the vocabulary lacks is `<unk>`."""
        index = self._index
        return [index.get(word, self.unk_id) for word in sentence]

    @cached_property
    def _index(self) -> dict[str, int]:
        return {word: i for i, word in enumerate(self.words)}
