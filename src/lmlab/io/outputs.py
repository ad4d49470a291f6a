"""Checks of the paths a command will write, made before it does any work.

Each check raises a one-line LmlabError naming the flag, the path and what to do, and writes
nothing: a command that is refused leaves the disk as it was. What lmlab may replace is
`atomic.replace_problem`'s rule; a run directory (`--out` of a training command) must be new,
empty, or an lmlab run: one holding the marker RUN_MARKER, which a run writes before anything
else (`claim_run_dir`). Whatever else a directory holds (metrics.jsonl, a tokenizer, a model) does
not make it a run. An output is never one of the command's inputs, nor inside one, nor holds one
(`check_not_inputs`).
"""

import json
import os
import re
import tempfile
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.atomic import MARKER, atomic_write_text, is_temp, replace_problem

RUN_MARKER = ".lmlab-run"  # in every run directory, written first: {"format": RUN_FORMAT}
RUN_FORMAT = "lmlab-run-1"
MAX_MARKER_BYTES = 2**16  # a marker or an older run's run.json read to recognise a run; larger is not one
_OLDER_CHECKPOINT = re.compile(r"^step_\d+\.pt$")


def check_file_output(path: str | Path, flag: str) -> None:
    """`path` can take a file lmlab writes (a new path, or a file to replace)."""
    _check(Path(path), flag, directory=False)


def check_dir_output(path: str | Path, flag: str) -> None:
    """`path` can take a directory lmlab writes whole (a new path, an empty directory or one lmlab wrote)."""
    _check(Path(path), flag, directory=True)


def check_run_dir(path: str | Path, flag: str = "--out") -> None:
    """`path` can be a run directory, which lmlab writes into file by file: a new path, an empty
    directory, or an lmlab run (`is_run_dir`)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise LmlabError(f"{flag} '{path}' is a file, not a run directory; choose a new {flag} directory")
    if path.is_dir() and not is_run_dir(path) and any(not is_temp(entry.name) for entry in path.iterdir()):
        raise LmlabError(f"{flag} '{path}' holds files and is not an lmlab run directory (no {RUN_MARKER} file); "
                         f"choose a new or empty {flag} directory")
    check_writable(path, path, flag)


def is_run_dir(path: Path) -> bool:
    """Whether the directory `path` holds an lmlab run: its RUN_MARKER says so. A run of lmlab before
    the marker is recognised by what only lmlab writes: a run.json naming its recipe, a checkpoints/
    step_N.pt, or a model/ that lmlab wrote whole (an n-gram run); its next session marks it."""
    marker = _small_json(path / RUN_MARKER)
    if marker is not None:
        return marker.get("format") == RUN_FORMAT
    settings = _small_json(path / "run.json")
    checkpoints = path / "checkpoints"
    return (isinstance(settings.get("recipe") if settings else None, str) or (path / "model" / MARKER).is_file()
            or (checkpoints.is_dir() and any(_OLDER_CHECKPOINT.match(p.name) for p in checkpoints.iterdir())))


def claim_run_dir(path: str | Path) -> None:
    """Make `path` an lmlab run directory (creating it): write RUN_MARKER, before the run's first
    other write, so that `check_run_dir` accepts it again (to resume) and nothing else."""
    marker = Path(path) / RUN_MARKER
    if _small_json(marker) != {"format": RUN_FORMAT}:
        atomic_write_text(marker, json.dumps({"format": RUN_FORMAT}) + "\n")


def _small_json(path: Path) -> dict | None:
    """The JSON object in the file `path`, or None (no such file, too large, not a JSON object)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_MARKER_BYTES:
            return None
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def check_not_inputs(outputs: list[tuple[str, str]], inputs: list[tuple[str, str]]) -> None:
    """No output path is an input path, lies inside one, or holds one: writing it would change or
    destroy what the command reads (a model quantized onto itself, a run written into its data
    directory). Each is a (flag, path) pair; paths are compared resolved, symbolic links followed,
    and an input that does not exist is no file to harm."""
    for in_flag, given in inputs:
        if not os.path.lexists(given):
            continue
        source = Path(os.path.realpath(given))
        for out_flag, out in outputs:
            target = Path(os.path.realpath(out))
            if target == source or source in target.parents or target in source.parents:
                how = "is" if target == source else "lies inside" if source in target.parents else "holds"
                raise LmlabError(f"{out_flag} '{out}' {how} the input {in_flag} '{given}', which writing it would "
                                 f"change; choose an {out_flag} outside the command's inputs")


def check_writable(path: Path, directory: Path, flag: str) -> None:
    """lmlab can create files in `directory` (where `path` will be written): its nearest existing
    ancestor takes a new file. Probed with an anonymous file, so nothing is left behind."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():
            raise LmlabError(f"{flag} '{path}': '{existing}' is a symbolic link to '{os.readlink(existing)}', which "
                             f"does not exist; choose another {flag}")
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
        fix = ("name the real path" if path.is_symlink() else
               "name a new path or an lmlab-written directory" if directory else "name a file, not a directory")
        raise LmlabError(f"{flag}: {problem}; {fix}")
    check_writable(path, path.parent, flag)
