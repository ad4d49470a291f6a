"""Read a user's corpus into a list of documents.

Three shapes of input, chosen by what the path is:
- a `.jsonl` file: one document per non-blank line, taken from that line's "text" field;
- any other file: the whole file is one document (read as UTF-8);
- a directory: every text file under it, recursively, in sorted path order. Text files are those
  with a suffix in `TEXT_SUFFIXES` or no suffix at all, plus `.jsonl` files read as above. Hidden
  files and folders (name starting with ".") are skipped, and so are files that are not UTF-8 or
  contain NUL bytes (binary files that happen to match).

Documents holding only whitespace are dropped everywhere. Files are read line by line with a bound
on each line (`io.lines`): a line over the limit, or bytes that are not UTF-8 in a file the user
named, is an error naming the file and the line; data larger than half the machine's memory is
refused before any of it is read.
"""

import os
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.lines import NotUtf8Error, check_fits_in_memory, file_size, json_objects, read_text

TEXT_SUFFIXES = frozenset({".txt", ".text", ".md", ".rst", ".py"})


def read_texts(path: str | os.PathLike) -> list[str]:
    """Every non-blank document found at `path` (a text file, a .jsonl file or a directory)."""
    path = Path(path)
    if not path.exists():
        raise LmlabError(
            f"data path '{path}' does not exist; pass a text file, a directory of text files, "
            f"or a .jsonl file with a 'text' field"
        )
    files = _text_files(path) if path.is_dir() else [path]
    check_fits_in_memory(path, sum(map(file_size, files)))
    if path.is_dir():
        texts = [text for file in files for text in _read_directory_file(file)]
    elif path.suffix == ".jsonl":
        texts = _read_jsonl(path)
    else:
        texts = [read_text(path)]
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise LmlabError(
            f"data path '{path}' holds no text; pass files with some non-whitespace text"
        )
    return texts


def _text_files(root: Path) -> list[Path]:
    """Text and .jsonl files under `root`, sorted, hidden ones left out."""
    files = []
    for file in root.rglob("*"):
        relative = file.relative_to(root)
        if any(part.startswith(".") for part in relative.parts) or not file.is_file():
            continue
        if file.suffix in TEXT_SUFFIXES or file.suffix in ("", ".jsonl"):
            files.append(file)
    return sorted(files, key=lambda file: file.relative_to(root).as_posix())


def _read_directory_file(file: Path) -> list[str]:
    """The documents in one file found in a directory; none if it turns out to be binary."""
    if file.suffix == ".jsonl":
        return _read_jsonl(file)
    try:
        text = read_text(file)
    except NotUtf8Error:
        return []
    return [] if "\0" in text else [text]


def _read_jsonl(file: Path) -> list[str]:
    """The "text" field of every non-blank line of a JSON Lines file."""
    texts = []
    for number, record in json_objects(file, "each line must be an object with a 'text' field"):
        if not isinstance(record.get("text"), str):
            raise LmlabError(
                f"{file}:{number} has no string 'text' field; each line must be an object like "
                f'{{"text": "..."}}'
            )
        texts.append(record["text"])
    return texts
