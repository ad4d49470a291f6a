"""Read a user's corpus into a list of documents.

Three shapes of input, chosen by what the path is:
- a `.jsonl` file: one document per non-blank line, taken from that line's "text" field;
- any other file: the whole file is one document (read as UTF-8);
- a directory: every text file under it, recursively, in sorted path order. Text files are those
  with a suffix in `TEXT_SUFFIXES` or no suffix at all, plus `.jsonl` files read as above. Hidden
  files and folders (name starting with ".") are skipped, and so are files that are not UTF-8 or
  contain NUL bytes (binary files that happen to match).

Documents holding only whitespace are dropped everywhere.
"""

import json
import os
from pathlib import Path

from lmlab.errors import LmlabError

TEXT_SUFFIXES = frozenset({".txt", ".text", ".md", ".rst", ".py"})


def read_texts(path: str | os.PathLike) -> list[str]:
    """Every non-blank document found at `path` (a text file, a .jsonl file or a directory)."""
    path = Path(path)
    if not path.exists():
        raise LmlabError(
            f"data path '{path}' does not exist; pass a text file, a directory of text files, "
            f"or a .jsonl file with a 'text' field"
        )
    if path.is_dir():
        texts = [text for file in _text_files(path) for text in _read_directory_file(file)]
    elif path.suffix == ".jsonl":
        texts = _read_jsonl(path)
    else:
        texts = [_read_text_file(path)]
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
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    return [] if "\0" in text else [text]


def _read_text_file(file: Path) -> str:
    """The contents of a file that must be UTF-8 text (one the user named, or a .jsonl file)."""
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise LmlabError(
            f"data file '{file}' is not UTF-8 text (bad byte at offset {error.start}); "
            f"convert it to UTF-8 or pass a different file"
        ) from error


def _read_jsonl(file: Path) -> list[str]:
    """The "text" field of every non-blank line of a JSON Lines file."""
    texts = []
    for number, line in enumerate(_read_text_file(file).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise LmlabError(
                f"{file}:{number} is not valid JSON ({error.msg}); each line must be an object "
                f"with a 'text' field"
            ) from error
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise LmlabError(
                f"{file}:{number} has no string 'text' field; each line must be an object like "
                f'{{"text": "..."}}'
            )
        texts.append(record["text"])
    return texts
