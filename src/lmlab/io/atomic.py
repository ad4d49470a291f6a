"""Atomic writes that replace only what lmlab wrote, and leave nothing behind when killed.

A write goes to a temporary sibling, then is renamed onto its path, so readers never see half a
file. The temporary is named after its writer (`.NAME.PID-HOST-XXXXXXXX.tmp`), so a write killed
midway (kill -9, a crash) leaves nothing that cannot be recognised: the next atomic write into the
same directory removes the temporaries of writers on this host that are no longer running.

lmlab replaces an existing path only if it wrote it. A file replaces a file. A directory replaces
an empty directory or one that lmlab wrote whole, which it recognises by the marker file `.lmlab`
it puts in every directory it writes this way. Anything else (a directory where a file is due, a
file where a directory is due, a directory without the marker) is refused with an LmlabError, and
nothing is moved or deleted. Nor does lmlab write through a symbolic link: a link where it would
write is refused before any work, whatever it points to (a directory, a file, nothing).

A write that fails for want of space (a full disk, a quota, the file size limit) becomes one
LmlabError naming the path; as on any failure, the temporary is removed, what was at the path is
untouched, and the directories the write created for it are removed again.
"""

import contextlib
import errno
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
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})  # a full disk, a full quota, the file size limit
PROBE_BYTES = 2**16  # what `no_space` tries to write where a library's error kept no errno


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds.

    Works for files and directories alike: whatever the block creates at the yielded path
    replaces `path` in one rename, if lmlab may replace what is there (`replace_problem`);
    a directory gets the `.lmlab` marker. On error the temporary is removed, `path` is untouched,
    and so are the directories above it as they were (those made for it are removed); a write
    that ran out of space is an LmlabError saying so.
    """
    path = Path(path)
    if path.is_symlink():
        raise LmlabError(f"{symlink_problem(path)}; nothing was written")
    created = make_parents(path.parent)
    tmp = None
    try:
        remove_stale_temps(path.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}-{_HOST}-", suffix=".tmp", dir=path.parent))
        target = tmp / path.name
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
    except BaseException as error:
        reason = no_space(error, path.parent)
        _remove(tmp, created)
        tmp = None
        if reason:
            raise no_space_error(path, reason) from None
        raise
    finally:
        _remove(tmp, [])


def make_parents(directory: Path) -> list[Path]:
    """Create `directory` and its missing ancestors; the ones this call created, innermost first."""
    missing = []
    while not directory.exists() and not directory.is_symlink() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    created = []
    for made in reversed(missing):
        try:
            made.mkdir()
        except FileExistsError:  # another writer made it meanwhile
            continue
        except OSError as error:
            _remove(None, created)
            reason = no_space(error, made.parent)
            if reason:
                raise no_space_error(made, reason) from None
            raise
        created.insert(0, made)
    return created


def no_space(error: BaseException, directory: Path) -> str | None:
    """Why `error`, raised while writing into `directory`, is a want of space ("No space left on
    device", "Disk quota exceeded", "File too large"), or None if it is not. The OSError may be
    anywhere in the chain of exceptions; a library that keeps no errno (torch's "unexpected pos",
    safetensors' SafetensorError) is judged by a probe: writing PROBE_BYTES there fails as well."""
    seen, link = set(), error
    while link is not None and id(link) not in seen:
        if isinstance(link, OSError) and link.errno in NO_SPACE:
            return os.strerror(link.errno)
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    if not isinstance(error, Exception) or isinstance(error, LmlabError) or not directory.is_dir():
        return None
    try:
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(bytes(PROBE_BYTES))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as probe_error:
        return os.strerror(probe_error.errno) if probe_error.errno in NO_SPACE else None
    return None


def no_space_error(path: Path, reason: str) -> LmlabError:
    """The one error of a write to `path` that ran out of space."""
    return LmlabError(f"no space left to write '{path}' ({reason}); nothing there changed: free some space or "
                      "write elsewhere")


def append_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Append `data` to the file `path` whole or not at all: a write cut short is undone, and one that
    ran out of space is an LmlabError naming the path."""
    with open(path, "ab", buffering=0) as file:
        start = file.seek(0, os.SEEK_END)
        try:
            rest = memoryview(data)
            while rest:
                rest = rest[file.write(rest):]
        except OSError as error:
            file.truncate(start)
            reason = no_space(error, Path(path).parent)
            if reason:
                raise no_space_error(Path(path), reason) from None
            raise


def _remove(tmp: Path | None, created: list[Path]) -> None:
    """Remove the temporary `tmp`, then the directories in `created` (innermost first) that are empty."""
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    for directory in created:
        try:
            directory.rmdir()
        except OSError:  # not empty: another writer's, or the user's since
            return


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def replace_problem(path: Path, directory: bool) -> str | None:
    """Why lmlab may not write a directory (else a file) at `path`, or None if it may: the path is
    free, or holds a file where a file is due, or an empty or lmlab-written directory where one is due."""
    if path.is_symlink():
        return symlink_problem(path)
    if not path.exists():
        return None
    if not path.is_dir():
        return None if not directory else f"'{path}' is a file, and lmlab writes a directory there"
    if not directory:
        return f"'{path}' is a directory, and lmlab writes a file there"
    if (path / MARKER).exists() or not any(path.iterdir()):
        return None
    return f"'{path}' is a directory that lmlab did not write (it has no {MARKER} file), so lmlab will not replace it"


def symlink_problem(path: Path) -> str:
    """Why lmlab does not write at the symbolic link `path`."""
    target = os.readlink(path)
    kind = ("a directory" if path.is_dir() else "a file") if path.exists() else "nothing (it dangles)"
    return f"'{path}' is a symbolic link to '{target}', which is {kind}, and lmlab does not write through links"


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
