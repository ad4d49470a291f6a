"""Atomic writes that replace only what lmlab wrote, and leave nothing behind when killed.

A write goes to a temporary sibling, then is renamed onto its path, so readers never see half a
file. The temporary is named after its writer (`.NAME.PID-HOST-XXXXXXXX.tmp`), so a write killed
midway (kill -9, a crash) leaves nothing that cannot be recognised: the next atomic write into the
same directory removes the temporaries of writers on this host that are no longer running.

lmlab replaces an existing path only if it wrote it. A file replaces a file. A directory replaces
an empty directory or one that lmlab wrote whole, which it recognises by the marker file `.lmlab`
it puts in every directory it writes this way. Anything else (a directory where a file is due, a
file where a directory is due, a directory without the marker) is refused with an LmlabError, and
nothing is moved or deleted.
"""

import contextlib
import hashlib
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from lmlab.errors import LmlabError

MARKER = ".lmlab"  # in every directory lmlab wrote whole: lmlab may replace it
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_TEMP = re.compile(r"^\..+\.(\d+)-([0-9a-f]{8})-[a-z0-9_]+\.tmp$")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds.

    Works for files and directories alike: whatever the block creates at the yielded path
    replaces `path` in one rename, if lmlab may replace what is there (`replace_problem`);
    a directory gets the `.lmlab` marker. On error the temporary is removed and `path` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}-{_HOST}-", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    try:
        yield target
        directory = target.is_dir() and not target.is_symlink()
        problem = replace_problem(path, directory)
        if problem:
            raise LmlabError(f"{problem}; nothing was written")
        if directory:
            (target / MARKER).write_text("written by lmlab, which may replace this directory as a whole\n")
        if path.is_dir() and not path.is_symlink():
            os.replace(path, tmp / f"{path.name}.old")  # removed with the temporary
        os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def replace_problem(path: Path, directory: bool) -> str | None:
    """Why lmlab may not write a directory (else a file) at `path`, or None if it may: the path is
    free, or holds a file where a file is due, or an empty or lmlab-written directory where one is due."""
    if not path.exists():
        return None
    if not path.is_dir():
        return None if not directory else f"'{path}' is a file, and lmlab writes a directory there"
    if not directory:
        return f"'{path}' is a directory, and lmlab writes a file there"
    if (path / MARKER).exists() or not any(path.iterdir()):
        return None
    return f"'{path}' is a directory that lmlab did not write (it has no {MARKER} file), so lmlab will not replace it"


def is_temp(name: str) -> bool:
    """Whether `name` is one of atomic_path's temporaries."""
    return _TEMP.match(name) is not None


def remove_stale_temps(directory: Path) -> None:
    """Remove the temporaries in `directory` left by writers on this host that are no longer
    running (killed mid-write); a running writer's are never touched."""
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            match = _TEMP.match(entry.name)
            if match and match[2] == _HOST and not _running(int(match[1])):
                shutil.rmtree(entry, ignore_errors=True)


def _running(pid: int) -> bool:
    if os.name != "posix":  # os.kill would terminate it: keep every temporary
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
