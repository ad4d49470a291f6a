"""The word2vec file format (Mikolov et al.'s C tool, read by gensim's `KeyedVectors.load_word2vec_format`).

A header line "V D", then V rows: the word, a space, and its D numbers, as text ("king 0.12 -0.5 ...\\n") or,
in the binary form, as D little-endian float32s followed by a newline. Words hold no spaces. This module
only reads and writes that layout: `write_word2vec` and `read_word2vec` take and give (words, (V, D) float32
array). A file from anyone is read within bounds: the header's sizes are checked against the file's length
before anything is allocated, and every row's word and numbers are checked.
"""

import os
from pathlib import Path

import numpy as np

from lmlab.errors import LmlabError

MAX_WORDS = 10_000_000
MAX_DIM = 10_000
MAX_NUMBERS = 2**29  # 2 GiB of float32: words x dimensions
MAX_WORD_BYTES = 1000
MAX_NUMBER_CHARS = 32  # a number in the text form, with its separator


def write_word2vec(path: str | os.PathLike, words: list[str], vectors: np.ndarray, binary: bool = False) -> None:
    """Write `words` and their rows of `vectors` (V, D) to `path` in the word2vec format."""
    if any(not w or any(c.isspace() for c in w) for w in words):
        raise LmlabError("a word2vec file cannot hold a word that is empty or contains white space")
    vectors = np.ascontiguousarray(vectors, dtype="<f4")  # (V, D)
    with open(path, "wb") as f:
        f.write(f"{len(words)} {vectors.shape[1]}\n".encode())
        for word, row in zip(words, vectors):
            if binary:
                f.write(word.encode("utf-8") + b" " + row.tobytes() + b"\n")
            else:
                f.write((word + " " + " ".join(f"{x:.6g}" for x in row) + "\n").encode("utf-8"))


def read_word2vec(path: str | os.PathLike) -> tuple[list[str], np.ndarray]:
    """(words, vectors (V, D) float32) from a word2vec file, text or binary (told apart by its rows)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            header = f.readline(64)
            try:
                count, dim = (int(x) for x in header.split())
            except ValueError:
                raise LmlabError(f"'{path}' does not start with a word2vec header 'WORDS DIMENSIONS'; "
                                 "pass a word2vec .txt or .bin file") from None
            if not (1 <= count <= MAX_WORDS and 1 <= dim <= MAX_DIM and count * dim <= MAX_NUMBERS):
                raise LmlabError(f"'{path}' declares {count} words of {dim} numbers; lmlab reads up to {MAX_WORDS:,} "
                                 f"words of up to {MAX_DIM:,} numbers, {MAX_NUMBERS:,} numbers in all")
            if path.stat().st_size > len(header) + count * (MAX_WORD_BYTES + 2 + dim * MAX_NUMBER_CHARS):
                raise LmlabError(f"'{path}' is larger than {count} rows of {dim} numbers can be; it is not a "
                                 "word2vec file")
            body = f.read()
    except OSError as e:
        raise LmlabError(f"cannot read '{path}' ({e.strerror}); pass a word2vec .txt or .bin file") from None
    if _looks_binary(body, dim):
        return _read_binary(path, body, count, dim)
    return _read_text(path, body, count, dim)


def _looks_binary(body: bytes, dim: int) -> bool:
    """A binary row is "word " then 4 * dim raw bytes: the first row's text form would be printable."""
    _, _, rest = body.partition(b" ")
    row = rest[:4 * dim]
    try:
        text = row.decode("ascii")
    except UnicodeDecodeError:
        return True
    return not all(c.isprintable() or c.isspace() for c in text)


def _read_binary(path: Path, body: bytes, count: int, dim: int) -> tuple[list[str], np.ndarray]:
    words, rows, at, size = [], np.empty((count, dim), dtype=np.float32), 0, 4 * dim
    for i in range(count):
        while at < len(body) and body[at:at + 1] in (b"\n", b"\r"):
            at += 1  # the newline the C tool writes after each row
        space = body.find(b" ", at, at + MAX_WORD_BYTES + 1)
        if space < 0 or space + 1 + size > len(body):
            raise LmlabError(f"'{path}' ends at word {i + 1} of the {count} its header declares; the file is "
                             "truncated or not a binary word2vec file")
        words.append(_word(path, body[at:space], i))
        rows[i] = np.frombuffer(body, dtype="<f4", count=dim, offset=space + 1)
        at = space + 1 + size
    return _checked(path, words, rows)


def _read_text(path: Path, body: bytes, count: int, dim: int) -> tuple[list[str], np.ndarray]:
    try:
        lines = body.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise LmlabError(f"'{path}' is neither UTF-8 text nor binary word2vec rows; the file is damaged") from None
    lines = [line for line in lines if line.strip()]
    if len(lines) != count:
        raise LmlabError(f"'{path}' has {len(lines)} rows but its header declares {count}; the file is truncated "
                         "or not a word2vec file")
    words, rows = [], np.empty((count, dim), dtype=np.float32)
    for i, line in enumerate(lines):
        parts = line.rstrip().split(" ")
        if len(parts) != dim + 1:
            raise LmlabError(f"'{path}' line {i + 2} has {len(parts) - 1} numbers, not the header's {dim}")
        words.append(_word(path, parts[0].encode("utf-8"), i))
        try:
            rows[i] = [float(x) for x in parts[1:]]
        except ValueError:
            raise LmlabError(f"'{path}' line {i + 2} holds something that is not a number") from None
    return _checked(path, words, rows)


def _word(path: Path, raw: bytes, i: int) -> str:
    try:
        word = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LmlabError(f"'{path}' word {i + 1} is not UTF-8; the file is damaged") from None
    if not word or len(raw) > MAX_WORD_BYTES:
        raise LmlabError(f"'{path}' word {i + 1} is empty or longer than {MAX_WORD_BYTES} bytes; the file is damaged")
    return word


def _checked(path: Path, words: list[str], rows: np.ndarray) -> tuple[list[str], np.ndarray]:
    if len(set(words)) != len(words):
        raise LmlabError(f"'{path}' lists a word twice; a word2vec file has one row per word")
    if not np.isfinite(rows).all():
        raise LmlabError(f"'{path}' holds numbers that are not finite (nan or inf); the file is damaged")
    return words, rows
