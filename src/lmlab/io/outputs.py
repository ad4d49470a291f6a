"""Checks of the paths a command will write, made before it does any work.

Each check raises a one-line LmlabError naming the flag, the path and what to do, and writes
nothing: a command that is refused leaves the disk as it was. What lmlab may replace is
`atomic.replace_problem`'s rule; a run directory (`--out` of a training command) must be new,
empty, or one that lmlab wrote.
"""

import tempfile
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.atomic import MARKER, is_temp, replace_problem

# What a run directory holds from its first write on (tokenizer.json comes before run.json; ELMo
# writes no run.json; an n-gram run holds only its model): any of them marks a directory as lmlab's.
RUN_FILES = ("run.json", "tokenizer.json", "metrics.jsonl", "checkpoints", f"model/{MARKER}")


def check_file_output(path: str | Path, flag: str) -> None:
    """`path` can take a file lmlab writes (a new path, or a file to replace)."""
    _check(Path(path), flag, directory=False)


def check_dir_output(path: str | Path, flag: str) -> None:
    """`path` can take a directory lmlab writes whole (a new path, an empty directory or one lmlab wrote)."""
    _check(Path(path), flag, directory=True)


def check_run_dir(path: str | Path, flag: str = "--out") -> None:
    """`path` can be a run directory, which lmlab writes into file by file: a new path, an empty
    directory, or one holding an lmlab run (any of RUN_FILES)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise LmlabError(f"{flag} '{path}' is a file, not a run directory; choose a new {flag} directory")
    if path.is_dir() and not any((path / name).exists() for name in RUN_FILES) \
            and any(not is_temp(entry.name) for entry in path.iterdir()):
        raise LmlabError(f"{flag} '{path}' holds files and is not an lmlab run directory (no run.json); "
                         f"choose a new or empty {flag} directory")
    check_writable(path, path, flag)


def check_writable(path: Path, directory: Path, flag: str) -> None:
    """lmlab can create files in `directory` (where `path` will be written): its nearest existing
    ancestor takes a new file. Probed with an anonymous file, so nothing is left behind."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise LmlabError(f"{flag} '{path}': '{existing}' is a file, not a directory; choose another {flag}")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise LmlabError(f"{flag} '{path}' cannot be written ({e.strerror or e}); choose a {flag} in a "
                         "writable directory") from None


def _check(path: Path, flag: str, directory: bool) -> None:
    problem = replace_problem(path, directory)
    if problem:
        fix = "name a new path or an lmlab-written directory" if directory else "name a file, not a directory"
        raise LmlabError(f"{flag}: {problem}; {fix}")
    check_writable(path, path.parent, flag)
