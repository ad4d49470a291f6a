"""Word-level tokenization and a word vocabulary with a minimum count, for word2vec and ELMo.

Text is lower-cased and cut into sentences at line breaks and at ".", "!" and "?"; a word is a run
of letters and digits (an apostrophe inside a word keeps it whole: "don't"). Windows and language
models then stay inside a sentence, as in the original word2vec and ELMo training data.
"""

import re
from collections import Counter
from dataclasses import dataclass

from lmlab.errors import LmlabError

UNK = "<unk>"
_SENTENCE_END = re.compile(r"[.!?\n]+")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def split_words(text: str) -> list[list[str]]:
    """The lower-cased words of `text`, one list per sentence; sentences without words are dropped."""
    sentences = (_WORD.findall(part) for part in _SENTENCE_END.split(text.lower()))
    return [words for words in sentences if words]


def corpus_sentences(texts: list[str]) -> list[list[str]]:
    """Every sentence of every document, as lists of words."""
    return [words for text in texts for words in split_words(text)]


@dataclass(frozen=True)
class WordVocab:
    """Words by decreasing count (ties alphabetically) after `UNK` at id 0; `counts[i]` is how often
    word i occurs in the training text (for UNK: the occurrences of all the words left out)."""

    words: tuple[str, ...]
    counts: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "_ids", {w: i for i, w in enumerate(self.words)})

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self._ids

    def id(self, word: str) -> int:
        """The id of `word`, or of UNK when the vocabulary does not hold it."""
        return self._ids.get(word, 0)

    def encode(self, words: list[str]) -> list[int]:
        return [self._ids.get(w, 0) for w in words]


def build_vocab(sentences: list[list[str]], min_count: int = 5, extra: tuple[str, ...] = ()) -> WordVocab:
    """The words occurring at least `min_count` times, most frequent first, after UNK and `extra`
    (special tokens such as sentence boundaries, given count 0). Raises if no word qualifies."""
    if min_count < 1:
        raise LmlabError(f"min_count must be at least 1, got {min_count}")
    counts = Counter(w for words in sentences for w in words)
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    if not kept:
        most = max(counts.values(), default=0)
        raise LmlabError(f"no word occurs {min_count} times or more (the most frequent occurs {most} times); "
                         "lower --min-count or give more text")
    left_out = sum(counts.values()) - sum(counts[w] for w in kept)
    return WordVocab(words=(UNK, *extra, *kept), counts=(left_out, *(0 for _ in extra), *(counts[w] for w in kept)))


def save_vocab_text(vocab: WordVocab) -> str:
    """The vocabulary as text: one "word count" line per id, in id order."""
    return "".join(f"{w} {c}\n" for w, c in zip(vocab.words, vocab.counts))


def parse_vocab_text(text: str, source: str) -> WordVocab:
    """Read what `save_vocab_text` wrote; `source` names the file in errors."""
    words, counts = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split(" ")
        if len(parts) != 2 or not parts[1].isdigit():
            raise LmlabError(f"{source}:{number} is not a 'word count' line; the vocabulary file is damaged")
        words.append(parts[0])
        counts.append(int(parts[1]))
    if not words or words[0] != UNK:
        raise LmlabError(f"{source} does not start with {UNK}; it is not an lmlab word vocabulary")
    return WordVocab(words=tuple(words), counts=tuple(counts))
