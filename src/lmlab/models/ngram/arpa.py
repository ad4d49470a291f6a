"""ARPA files, the text format of SRILM and kenlm: write backoff tables, read them back.

    \\data\\
    ngram 1=3
    ngram 2=2

    \\1-grams:
    -0.6990   </s>
    -99       <s>   -0.3010
    ...
    \\2-grams:
    -0.1761   <s> a
    \\end\\

Each line is log10 P*(n-gram), its words, and (below the highest order) its log10 backoff weight,
absent when 0. A word may not contain whitespace. `<s>`, `</s>` and `<unk>` are the sentence
markers and the unknown word; a vocabulary without them (a BPE tokenizer) gets -99 entries for
them, so tools that require them (kenlm) load the file, and reading drops them again.
"""

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.lines import read_lines
from lmlab.models.ngram.tables import BackoffTables, lookup
from lmlab.models.ngram.vocabulary import BOS, EOS, UNK

MARKERS = (UNK, BOS, EOS)
NEVER = -99.0  # log10 of "probability zero" in ARPA files
LN10 = math.log(10)
ROWS_PER_CHUNK = 100_000
_COUNT = re.compile(r"ngram\s+(\d{1,3})\s*=\s*(\d{1,30})", re.ASCII)  # a header line: 'ngram 2=2328'


def write_arpa(tables: BackoffTables, words: Sequence[str], path: str | os.PathLike) -> tuple[int, ...]:
    """Write `tables` with token id i spelled `words[i]` to `path` (atomically); return the n-gram counts
    of its header, which include the -99 entries for markers the vocabulary lacks."""
    if len(words) != tables.vocab_size:
        raise LmlabError(f"{len(words)} words for a model over {tables.vocab_size} token ids; pass one word per id")
    bad = next((w for w in words if not w or w.split() != [w]), None)
    if bad is not None:
        raise LmlabError(f"token {bad!r} is empty or holds whitespace, which an ARPA file cannot spell")
    spelled = np.array(list(words), dtype=object)
    missing = [m for m in MARKERS if m not in set(words)]
    counts = (tables.sizes[0] + len(missing), *tables.sizes[1:])
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write("\n\\data\\\n")
        out.writelines(f"ngram {k}={count}\n" for k, count in enumerate(counts, 1))
        for k in range(1, tables.order + 1):
            out.write(f"\n\\{k}-grams:\n")
            if k == 1:
                out.writelines(f"{NEVER:.1f}\t{m}\n" for m in missing)
            ids = tables.token_ids(k)  # (n_k, k)
            backoffs = tables.log_backoffs[k - 1] if k < tables.order else None
            for begin in range(0, len(ids), ROWS_PER_CHUNK):
                rows = slice(begin, begin + ROWS_PER_CHUNK)
                out.writelines(_lines(spelled, ids[rows], tables.log_probs[k - 1][rows],
                                      None if backoffs is None else backoffs[rows]))
        out.write("\n\\end\\\n")
    return counts


def _lines(spelled: np.ndarray, ids: np.ndarray, log_probs: np.ndarray, log_backoffs: np.ndarray | None) -> list[str]:
    """ARPA lines for a chunk of n-grams: `log10 p <tab> words [<tab> log10 bo]`."""
    grams = spelled[ids[:, 0]]
    for j in range(1, ids.shape[1]):
        grams = grams + " " + spelled[ids[:, j]]
    probs = np.maximum(log_probs.astype(np.float64) / LN10, NEVER)
    if log_backoffs is None:
        return [f"{p:.6f}\t{g}\n" for p, g in zip(probs.tolist(), grams)]
    backoffs = np.maximum(log_backoffs.astype(np.float64) / LN10, NEVER)
    return [f"{p:.6f}\t{g}\t{b:.6f}\n" if b != 0 else f"{p:.6f}\t{g}\n"
            for p, g, b in zip(probs.tolist(), grams, backoffs.tolist())]


def read_arpa(path: str | os.PathLike, vocabulary: Mapping[str, int] | None = None) -> tuple[BackoffTables, list[str]]:
    """Backoff tables and their words from the ARPA file `path`. With `vocabulary` (word -> id, e.g. a
    tokenizer's) every word must be in it, except unused markers; without, the unigrams' words are the
    vocabulary in file order. A malformed file raises one line naming its line number."""
    path = Path(path)
    if not path.is_file():
        raise LmlabError(f"ARPA file '{path}' does not exist; pass the path of a .arpa file")
    grams = _parse((line for _, line in read_lines(path)), path)
    words, index = _vocabulary(grams[0], vocabulary, path)
    vocab_size = len(words)
    keys, log_probs, log_backoffs = [], [], []
    for k, (line_numbers, tokens, probs, backoffs) in enumerate(grams, 1):
        ids = np.array([[index.get(w, -1) for w in gram] for gram in tokens], dtype=np.int64).reshape(-1, k)
        if k == 1:
            keep = (ids[:, 0] >= 0) | np.array([gram[0] not in MARKERS for gram in tokens])  # drop unused markers
            ids, probs, backoffs = ids[keep], probs[keep], backoffs[keep]
            line_numbers = [n for n, kept in zip(line_numbers, keep) if kept]
            tokens = [t for t, kept in zip(tokens, keep) if kept]
        _check_known(ids, line_numbers, tokens, path, "the tokenizer's vocabulary" if vocabulary else "the 1-grams")
        if k == 1:
            key = ids[:, 0]
            context = np.zeros(len(key), dtype=np.int64)
        else:
            context = _index_of(keys, vocab_size, ids[:, :-1])
            key = context * vocab_size + ids[:, -1]
        bad = np.flatnonzero(context < 0)
        if len(bad):
            raise LmlabError(f"{path}:{line_numbers[bad[0]]}: the {k}-gram '{' '.join(tokens[bad[0]])}' has no "
                             f"entry for its first {k - 1} word(s); every n-gram's prefix must be listed")
        order = np.argsort(key, kind="stable")
        duplicate = np.flatnonzero(key[order][1:] == key[order][:-1])
        if len(duplicate):
            row = order[duplicate[0] + 1]
            raise LmlabError(f"{path}:{line_numbers[row]}: the {k}-gram '{' '.join(tokens[row])}' is listed twice")
        if k == 1:
            dense_probs = _dense_unigrams(key, probs, words, index, path)
            dense_backoffs = np.zeros(vocab_size)
            dense_backoffs[key] = backoffs
            keys.append(np.arange(vocab_size, dtype=np.int64))
            log_probs.append(dense_probs * LN10)
            log_backoffs.append(dense_backoffs * LN10)
        else:
            keys.append(key[order])
            log_probs.append(probs[order] * LN10)
            log_backoffs.append(backoffs[order] * LN10)
    order = len(grams)
    tables = BackoffTables(order, vocab_size, tuple(keys), tuple(p.astype(np.float32) for p in log_probs),
                           tuple(b.astype(np.float32) for b in log_backoffs[: order - 1]))
    return tables, words


def arpa_counts(path: str | os.PathLike) -> tuple[int, ...]:
    """The n-gram counts the header of the ARPA file `path` announces (what the file holds; `read_arpa`
    checks every section against them), read without the rest of the file."""
    path = Path(path)
    return tuple(_header(_Reader((line for _, line in read_lines(path)), path), path)[0])


def _parse(lines, path: Path):
    """Read the header and every section: per order (line numbers, word tuples, log10 probs, log10 backoffs)."""
    reader = _Reader(lines, path)
    sizes, number, line = _header(reader, path)
    grams = []
    for k, size in enumerate(sizes, 1):
        if line != f"\\{k}-grams:":
            more = k > 1 and not line.startswith("\\")  # another (k-1)-gram: the header's count is too low
            raise LmlabError(f"{path}:{number}: " + (f"the {k - 1}-grams go on past the {sizes[k - 2]} the header "
                             "announced; fix the count in the header" if more else
                             f"expected the '\\{k}-grams:' section, found '{line[:40]}'"))
        line_numbers, tokens, probs, backoffs = [], [], np.zeros(size), np.zeros(size)
        for row in range(size):
            number, line = reader.next_nonblank(f"{size} {k}-grams")
            fields = line.split()
            if line.startswith("\\"):
                raise LmlabError(f"{path}:{number}: the {k}-grams end after {row} of the {size} the header "
                                 f"announced; fix the count in the header")
            if len(fields) not in ((k + 1, k + 2) if k < len(sizes) else (k + 1,)):
                raise LmlabError(f"{path}:{number}: a {k}-gram line needs log10-prob, {k} word(s)"
                                 f"{' and an optional backoff' if k < len(sizes) else ''}; found '{line[:60]}'")
            probs[row] = _number(fields[0], path, number, "log10 probability")
            if len(fields) == k + 2:
                backoffs[row] = _number(fields[-1], path, number, "log10 backoff weight")
            tokens.append(tuple(fields[1:k + 1]))
            line_numbers.append(number)
        grams.append((line_numbers, tokens, probs, backoffs))
        number, line = reader.next_nonblank("'\\end\\'" if k == len(sizes) else f"'\\{k + 1}-grams:'")
    if line != "\\end\\":
        raise LmlabError(f"{path}:{number}: " + (f"the {len(sizes)}-grams go on past the {sizes[-1]} the header "
                         "announced; fix the count in the header" if not line.startswith("\\") else
                         f"expected '\\end\\' after the {len(sizes)}-grams, found '{line[:40]}'"))
    return grams


def _header(reader, path: Path) -> tuple[list[int], int, str]:
    """The header's n-gram counts, refused if the file cannot hold them, and the (line number, text) after it."""
    number, line = reader.next_nonblank("the '\\data\\' header")
    if line != "\\data\\":
        raise LmlabError(f"{path}:{number}: expected '\\data\\' to begin the ARPA file, found '{line[:40]}'")
    sizes, room = [], path.stat().st_size
    number, line = reader.next_nonblank("'ngram 1=N'")
    while line.startswith("ngram "):
        count = _COUNT.fullmatch(line)
        if not (count and int(count[1]) == len(sizes) + 1):
            raise LmlabError(f"{path}:{number}: expected 'ngram {len(sizes) + 1}=COUNT', found '{line[:60]}'")
        sizes.append(int(count[2]))
        if sizes == [0]:
            raise LmlabError(f"{path}:{number}: 'ngram 1=0' announces an empty vocabulary; an ARPA model needs "
                             "at least one 1-gram")
        room -= sizes[-1] * _shortest_line(len(sizes))
        if room < 0:  # checked before any table is allocated: a count of 10^14 is refused, not attempted
            raise LmlabError(f"{path}:{number}: the header announces {count[2]} {len(sizes)}-grams, more than the "
                             f"file's {path.stat().st_size} bytes can hold; the header is damaged, fix its counts")
        number, line = reader.next_nonblank(f"the '\\{len(sizes)}-grams:' section")
    if not sizes:
        raise LmlabError(f"{path}:{number}: expected 'ngram 1=COUNT' after '\\data\\', found '{line[:40]}'")
    return sizes, number, line


def _shortest_line(k: int) -> int:
    """Bytes of the shortest k-gram line: a one-digit log10 prob, k one-byte words, k separators, a newline."""
    return 2 * k + 2


class _Reader:
    """The non-blank lines of a file, stripped, with their line numbers."""

    def __init__(self, lines, path: Path):
        self.lines, self.path, self.number = iter(lines), path, 0

    def next_nonblank(self, expected: str) -> tuple[int, str]:
        """(line number, text) of the next non-blank line; a one-line error naming `expected` at the end."""
        for line in self.lines:
            self.number += 1
            if line.strip():
                return self.number, line.strip()
        raise LmlabError(f"{self.path}:{self.number}: the file ends before {expected}; it is truncated")


def _number(text: str, path: Path, number: int, what: str) -> float:
    """A finite float; a probability's log must also be <= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (what == "log10 probability" and value > 0):
        raise LmlabError(f"{path}:{number}: {text!r} is not a {what}"
                         f"{' (a number <= 0)' if what == 'log10 probability' else ' (a finite number)'}")
    return value


def _vocabulary(unigrams, vocabulary: Mapping[str, int] | None, path: Path) -> tuple[list[str], dict[str, int]]:
    """(id -> word, word -> id): the given vocabulary, or the unigrams in file order."""
    if vocabulary is None:
        words = [gram[0] for gram in unigrams[1]]
        return words, {w: i for i, w in enumerate(words)}
    words = [""] * len(vocabulary)
    for word, i in vocabulary.items():
        if not 0 <= i < len(words):
            raise LmlabError(f"vocabulary id {i} of {word!r} is outside 0..{len(words) - 1}; pass dense ids")
        words[i] = word
    return words, dict(vocabulary)


def _check_known(ids: np.ndarray, line_numbers: list[int], tokens, path: Path, known: str) -> None:
    """One line naming the first n-gram with a word outside `known` (the tokenizer, or the 1-grams)."""
    unknown = np.flatnonzero((ids < 0).any(axis=1))
    if len(unknown):
        row = unknown[0]
        word = next(w for w, i in zip(tokens[row], ids[row]) if i < 0)
        fix = "pass the tokenizer the ARPA file was made with" if known != "the 1-grams" else "list it as a 1-gram"
        raise LmlabError(f"{path}:{line_numbers[row]}: word {word!r} is not in {known}; {fix}")


def _dense_unigrams(ids: np.ndarray, log10_probs: np.ndarray, words: list[str], index: dict[str, int],
                    path: Path) -> np.ndarray:
    """(V,) log10 unigram probabilities; a vocabulary word without a line scores as `<unk>` (as in kenlm)."""
    dense = np.full(len(words), np.nan)
    dense[ids] = log10_probs
    missing = np.flatnonzero(np.isnan(dense))
    if len(missing):
        unk = index.get(UNK)
        if unk is None or np.isnan(dense[unk]):
            raise LmlabError(f"{path}: the 1-grams lack token {words[missing[0]]!r} and there is no <unk> entry "
                             "to score it with; pass the tokenizer the ARPA file was made with")
        dense[missing] = dense[unk]
    return dense


def _index_of(keys: list[np.ndarray], vocab_size: int, ids: np.ndarray) -> np.ndarray:
    """(m,) the level-j index of each row of ids (m, j) in the levels read so far, -1 where absent."""
    index = ids[:, 0]
    for j in range(1, ids.shape[1]):
        index = lookup(keys[j], vocab_size, index, ids[:, j])
    return index
