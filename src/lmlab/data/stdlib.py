"""A real-text corpus that is always at hand: the Python standard library's own source files.

Every Python install ships megabytes of well-written, well-commented code, so a model can be
trained on real text with no download. The files are read in sorted path order and cut at a
byte budget, so the corpus is the same on every machine with the same Python version.
"""

import os
import sysconfig
from pathlib import Path

from lmlab.errors import LmlabError

DEFAULT_MAX_BYTES = 4_000_000

# Folders left out: test suites, third-party packages, generated codec tables, build configuration.
SKIPPED_DIRS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "encodings"}
)
# Generated per machine at build time, so it would make the corpus differ between installs.
SKIPPED_FILE_PREFIX = "_sysconfigdata"


def stdlib_texts(max_bytes: int = DEFAULT_MAX_BYTES) -> list[str]:
    """The standard library's .py files, one document each, at most `max_bytes` UTF-8 bytes in all.

    The file that crosses the budget is cut at the last whole character that fits.
    """
    if max_bytes < 1:
        raise LmlabError(
            f"max_bytes {max_bytes} must be at least 1; the default is {DEFAULT_MAX_BYTES}"
        )
    texts, used = [], 0
    for file in _stdlib_files():
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        data = text.encode("utf-8")
        if used + len(data) >= max_bytes:
            tail = data[: max_bytes - used].decode("utf-8", errors="ignore")
            if tail:
                texts.append(tail)
            break
        texts.append(text)
        used += len(data)
    return texts


def _stdlib_files() -> list[Path]:
    """The standard library's .py files, sorted by path, with `SKIPPED_DIRS` pruned."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = [
            name
            for name in subdirectories
            if name not in SKIPPED_DIRS and not name.startswith((".", "config-"))
        ]
        files += [
            Path(directory, name)
            for name in names
            if name.endswith(".py") and not name.startswith(SKIPPED_FILE_PREFIX)
        ]
    return sorted(files, key=lambda file: file.relative_to(root).as_posix())
