"""A corpus split into passages: the units a retrieval index embeds and returns.

A corpus is a text file, a directory of them (`*.txt` and `*.md`, recursively, in sorted order) or
a JSON Lines file (`{"text": …, "source": …}` per line; `source` optional). Each document is cut
into sentences (after `.`, `!` or `?` and a space, or at a blank line), and sentences are packed
into passages of at most `max_words` words; the next passage starts with the last sentences of the
one before, up to `overlap` words, so a fact that straddles two passages is whole in one of them. A
sentence longer than `max_words` is cut by words. The defaults, 100 words with 20 of overlap, fit
all-MiniLM-L6-v2's 256-token window (a word is about 1.3 wordpieces).
"""

import re
from dataclasses import dataclass
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.lines import file_size, json_objects, read_text

MAX_WORDS = 100  # words in a passage, by default
OVERLAP = 20  # words a passage repeats from the one before, by default
CORPUS_SUFFIXES = (".txt", ".md")  # the files of a corpus directory
MAX_CORPUS_BYTES = 2**30  # 1 GiB of text: past this, build the index from parts
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


@dataclass(frozen=True)
class Passage:
    """A piece of a document: its text, the document it comes from, and its place there (0, 1, …)."""

    text: str
    source: str
    position: int


def check_sizes(max_words: int, overlap: int) -> None:
    """One line naming the flag for passage sizes that cannot work."""
    if max_words < 1:
        raise LmlabError(f"--passage-words {max_words} must be at least 1")
    if not 0 <= overlap < max_words:
        raise LmlabError(f"--overlap {overlap} must be in 0..{max_words - 1} (less than --passage-words)")


def split_document(text: str, source: str, max_words: int = MAX_WORDS, overlap: int = OVERLAP) -> list[Passage]:
    """The passages of one document, in order (none for a document of no words)."""
    check_sizes(max_words, overlap)
    sentences = []  # each a list of words, none longer than max_words
    for sentence in _SENTENCE_END.split(text):
        words = sentence.split()
        sentences += [words[i:i + max_words] for i in range(0, len(words), max_words)]
    passages, current, fresh = [], [], False  # fresh: `current` holds a sentence not yet in a passage
    for words in sentences:
        if fresh and sum(map(len, current)) + len(words) > max_words:
            passages.append(current)
            current = _tail(current, overlap, max_words - len(words))
        current.append(words)
        fresh = True
    if fresh:
        passages.append(current)
    return [Passage(" ".join(w for s in p for w in s), source, i) for i, p in enumerate(passages)]


def _tail(sentences: list[list[str]], overlap: int, room: int) -> list[list[str]]:
    """The last whole sentences of `sentences` that together hold at most min(overlap, room) words."""
    limit, kept, words = min(overlap, room), [], 0
    for sentence in reversed(sentences):
        if words + len(sentence) > limit:
            break
        kept.insert(0, sentence)
        words += len(sentence)
    return kept


def read_corpus(path: str | Path) -> list[tuple[str, str]]:
    """(source, text) of every document of the corpus at `path` (see the module's docstring); one
    line naming the problem for a missing path, an empty corpus or one over MAX_CORPUS_BYTES."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in CORPUS_SUFFIXES and p.is_file())
        if not files:
            raise LmlabError(f"--data '{path}' holds no {' or '.join(CORPUS_SUFFIXES)} files; pass a directory "
                             "of text files, a text file or a JSON Lines file")
    elif path.is_file():
        files = [path]
    else:
        raise LmlabError(f"--data '{path}' does not exist; pass a text file, a directory of them or a .jsonl file")
    total = sum(file_size(f) for f in files)
    if total > MAX_CORPUS_BYTES:
        raise LmlabError(f"--data '{path}' holds {total / 2**30:.1f} GiB of text, more than lmlab indexes at once "
                         f"({MAX_CORPUS_BYTES / 2**30:.0f} GiB); index a part of it")
    documents = []
    for file in files:
        if file.suffix == ".jsonl":
            documents += _jsonl_documents(file)
        else:
            documents.append((str(file.relative_to(path) if path.is_dir() else file.name), read_text(file)))
    if not any(text.split() for _, text in documents):
        raise LmlabError(f"--data '{path}' holds no words; pass text to index")
    return documents


def _jsonl_documents(file: Path) -> list[tuple[str, str]]:
    """(source, text) of each line of a JSON Lines corpus; `source` defaults to FILE:LINE."""
    hint = 'write one {"text": "...", "source": "..."} object per line ("source" may be left out)'
    documents = []
    for number, record in json_objects(file, hint):
        text, source = record.get("text"), record.get("source", f"{file.name}:{number}")
        if not isinstance(text, str) or not isinstance(source, str):
            raise LmlabError(f"{file}:{number} needs a string \"text\" (and \"source\", if given, a string); {hint}")
        documents.append((source, text))
    return documents


def split_corpus(documents: list[tuple[str, str]], max_words: int = MAX_WORDS,
                 overlap: int = OVERLAP) -> list[Passage]:
    """Every passage of every (source, text) document, in order."""
    return [p for source, text in documents for p in split_document(text, source, max_words, overlap)]
