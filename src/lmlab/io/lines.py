"""The lines of a user's text file, read as a stream with a bound on each line.

Every reader of data files (corpora, JSONL, CSV, ARPA) goes through `read_lines`, so each one
holds at most one line in memory beyond what it keeps, a line too long to be text (a 50 MB JSON
record, a binary blob) is refused as soon as the limit is passed instead of hanging the tokenizer,
and bytes that are not UTF-8 are reported with the file and the line. The limit is
`DEFAULT_MAX_LINE_MB` megabytes; set the environment variable `LMLAB_MAX_LINE_MB` to change it.
"""

import json
import os
from collections.abc import Iterator
from pathlib import Path

from lmlab.errors import LmlabError

MAX_LINE_MB_VARIABLE = "LMLAB_MAX_LINE_MB"
DEFAULT_MAX_LINE_MB = 8
MB = 2**20


class NotUtf8Error(LmlabError):
    """A line of a file is not UTF-8 (readers of whole directories skip such files as binary)."""


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number from 1, text with its line ending) for every line of the UTF-8 file `path`;
    one-line errors naming path:line for a line over the limit or bytes that are not UTF-8."""
    limit = max_line_bytes()
    try:
        file = open(path, "rb")
    except OSError as e:
        raise LmlabError(f"cannot read '{path}' ({e.strerror or e}); pass a readable text file") from None
    with file:
        readline = file.readline
        number = 0
        while line := readline(limit + 1):
            number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                raise LmlabError(f"{path}:{number} is longer than {limit / MB:g} MB, the most lmlab reads as "
                                 "one line; split it into shorter lines, or raise the limit with "
                                 f"{MAX_LINE_MB_VARIABLE}=MB")
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise NotUtf8Error(f"{path}:{number} is not UTF-8 text (byte 0x{line[e.start]:02x} at column "
                                   f"{e.start + 1}); convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                                   ) from None
            yield number, text


def read_text(path: str | os.PathLike) -> str:
    """The whole UTF-8 file `path` with universal newlines (as `Path.read_text`), read by `read_lines`."""
    return "".join(line for _, line in read_lines(path)).replace("\r\n", "\n").replace("\r", "\n")


def json_objects(path: str | os.PathLike, hint: str) -> Iterator[tuple[int, dict]]:
    """(line number, JSON object) for every non-blank line of the JSON Lines file `path`; a line that
    is not a JSON object (nesting or numbers too deep or long for Python's parser included) is a
    one-line error ending with `hint`."""
    for number, text in read_lines(path):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            reason = f"is not valid JSON ({e.msg}, column {e.colno})"
        except RecursionError:
            reason = "is not valid JSON (nested too deeply)"
        except ValueError as e:  # a number of more than 4300 digits
            reason = f"is not valid JSON ({str(e).split(':')[0]})"
        else:
            surrogate = lone_surrogate(value) if "\\u" in text else None  # only a \uXXXX escape makes one
            if surrogate is not None:
                raise LmlabError(f"{path}:{number} holds a lone surrogate (\\u{ord(surrogate):04x}), which is not "
                                 "Unicode text; remove it (a character beyond U+FFFF is escaped as a pair, "
                                 "\\ud83d\\ude00)")
            if isinstance(value, dict):
                yield number, value
                continue
            reason = f"is a JSON {type(value).__name__}, not an object"
        raise LmlabError(f"{path}:{number} {reason}; {hint}")


def lone_surrogate(value) -> str | None:
    """The first lone surrogate (U+D800..U+DFFF) in any string, key or value, of the JSON `value`, or None.

    JSON's `\\ud800` escapes decode to such characters, which no UTF-8 can hold: the tokenizer, a file
    writer and every other consumer of text fails on them, so a reader refuses them where it can name the
    line. (Strictly decoded UTF-8 text never holds one: only a JSON escape makes it.)"""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += item.keys()
            stack += item.values()
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as error:
                return item[error.start]
    return None


def max_line_bytes() -> int:
    """The longest line `read_lines` accepts, from LMLAB_MAX_LINE_MB (default 8)."""
    value = os.environ.get(MAX_LINE_MB_VARIABLE) or str(DEFAULT_MAX_LINE_MB)
    try:
        megabytes = float(value)
    except ValueError:
        megabytes = float("nan")
    if not 0 < megabytes < 2**20:
        raise LmlabError(f"{MAX_LINE_MB_VARIABLE}={value!r} is not a number of megabytes; set it to, say, 64 "
                         f"(or unset it for the default {DEFAULT_MAX_LINE_MB})")
    return int(megabytes * MB)


def check_fits_in_memory(path: str | os.PathLike, size: int) -> None:
    """Refuse data of `size` bytes at `path` that a reader would hold whole but that is more than
    half of this machine's memory, before reading any of it."""
    memory = physical_memory()
    if memory is not None and size > memory // 2:
        raise LmlabError(f"'{path}' holds {size / 2**30:.1f} GB, more than half of this machine's "
                         f"{memory / 2**30:.1f} GB of memory, and lmlab reads it whole; pass a part of it")


def physical_memory() -> int | None:
    """Bytes of RAM, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def file_size(path: Path) -> int:
    """Bytes in the file `path` (0 if it cannot be read: the reader then says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
