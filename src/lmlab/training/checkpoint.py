"""Checkpoints that let training resume exactly: model, optimizer, scheduler, step and every RNG.

Each is written to a temporary file and renamed, so a crash mid-write leaves the previous ones
intact; only the last `keep` are kept. The data position is the step itself, because the batch
at a step is a pure function of (seed, step) — see `lmlab.data.blocks.batch_starts`.

A checkpoint holds tensors and plain data only (dicts, lists, tuples, strings, numbers, None)
and is read with `torch.load(weights_only=True)`, which builds nothing else: a file planted in
a run's checkpoints/ cannot run code. Its "format" entry tells lmlab's checkpoints from others.
"""

import pickle
import random
import re
import shutil
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path, remove_stale_temps
from lmlab.io.outputs import check_run_dir

_NAME = re.compile(r"step_(\d+)\.pt$")
FORMAT = "lmlab-checkpoint-2"  # 2: plain data only; 1 (no "format" entry) pickled the numpy RNG state
_PLAIN = (str, int, float, bool, type(None), torch.Tensor)


def rng_state() -> dict:
    """Every random generator a training step may draw from, as tensors and plain data."""
    numpy = np.random.get_state(legacy=False)
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": numpy | {"state": {"key": torch.from_numpy(numpy["state"]["key"].astype(np.int64)),
                                         "pos": numpy["state"]["pos"]}}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore the generators `rng_state` saved."""
    random.setstate(state["python"])
    numpy = state["numpy"]
    np.random.set_state(numpy | {"state": {"key": numpy["state"]["key"].numpy().astype(np.uint32),
                                           "pos": numpy["state"]["pos"]}})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory: Path, step: int, state: dict, keep: int) -> Path:
    """Write `state` (plus RNG states) as step_{step}.pt atomically; delete all but the newest `keep`.
    `state` must be tensors and plain data, which is all `load_checkpoint` reads back."""
    state = state | {"format": FORMAT, "step": step, "rng": rng_state()}
    _check_plain(state, "checkpoint")
    path = checkpoint_file(directory, step)
    with atomic_path(path) as tmp, open(tmp, "wb") as file:  # through Python's file: a full disk's OSError shows
        torch.save(state, file)
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
        shutil.rmtree(shards_of(old), ignore_errors=True)
    return path


def checkpoint_file(directory: Path, step: int) -> Path:
    """The checkpoint of `step` in `directory` (a sharded run keeps its tensors beside it, in `shards_of`)."""
    return directory / f"step_{step:07d}.pt"


def shards_of(checkpoint: Path) -> Path:
    """The directory of a sharded run's tensors, beside its checkpoint file."""
    return checkpoint.with_suffix(".shards")


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if _NAME.search(p.name)), key=lambda p: int(_NAME.search(p.name)[1]))


def resume_checkpoint(out: Path, resume: bool) -> dict | None:
    """The newest checkpoint of the run in `out` when resuming, None for a new run. Refuses to
    start a new run over an old one, and to resume a run that has no checkpoint."""
    check_run_dir(out)
    remove_stale_temps(out / "checkpoints")
    checkpoints = list_checkpoints(out / "checkpoints")
    if checkpoints and not resume:
        raise LmlabError(f"'{out}' already holds a run ({checkpoints[-1].name}); pass --resume to continue it "
                         "or choose a new --out directory")
    if resume and not checkpoints:
        raise LmlabError(f"nothing to resume in '{out}' (no checkpoints/step_*.pt); drop --resume to start a run")
    return load_checkpoint(checkpoints[-1]) if resume else None


def setting_differences(saved: dict, now: dict, resumable: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """"name: saved in the checkpoint, now now" for every setting of `now` that differs from `saved`,
    except the `resumable` ones (which a resumed run may change): a resumed run must be the run
    that wrote the checkpoint, else 'resume' means nothing."""
    return [f"{name}: {saved.get(name)!r} in the checkpoint, {value!r} now" for name, value in now.items()
            if name not in resumable and saved.get(name) != value]


def load_checkpoint(path: Path) -> dict:
    """Read a checkpoint as tensors and plain data only. A file holding anything else (an older
    lmlab's checkpoint, a planted pickle) is refused unread, and so is one that is corrupt,
    truncated or not lmlab's: an LmlabError naming it."""
    try:
        with warnings.catch_warnings():  # torch warns about a foreign file's pickle protocol: the error says it all
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # weights_only met something other than tensors and plain data
        raise LmlabError(f"checkpoint {path} holds Python objects, not only tensors and plain data (a checkpoint "
                         "of lmlab before checkpoint format 2, or not lmlab's); it was not loaded, as that could run "
                         "code: start the run again in a new --out directory") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as e:
        raise LmlabError(f"checkpoint {path} is corrupt or truncated ({type(e).__name__}); delete it to resume "
                         "from the one before, or start again without --resume") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise LmlabError(f"{path} is not an lmlab checkpoint (no format {FORMAT!r} in it); move it out of "
                         "checkpoints/ to resume from the others, or start again in a new --out directory")
    return Checkpoint(ckpt, path)


class Checkpoint(dict):
    """A loaded checkpoint: a dict whose missing entry is an LmlabError naming the file, since a
    checkpoint that lacks what a recipe reads was written by another kind of run."""

    def __init__(self, entries: dict, path: Path):
        super().__init__(entries)
        self.path = path

    def __missing__(self, key):
        raise LmlabError(f"checkpoint {self.path} has no {key!r}: another kind of run (another command or --arch) "
                         "wrote it; resume with the command that started the run, or start again in a new --out")


def _check_plain(value, where: str) -> None:
    """Raise TypeError if `value` holds anything but tensors and plain data (a bug in the recipe
    that saved it: `load_checkpoint` would refuse the file)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_plain(key, where)
            _check_plain(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
    elif not isinstance(value, _PLAIN):
        raise TypeError(f"{where} is a {type(value).__name__}; a checkpoint holds tensors and plain data only")
