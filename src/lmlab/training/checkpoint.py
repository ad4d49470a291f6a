"""Checkpoints that let training resume exactly: model, optimizer, scheduler, step and every RNG.

Each is written to a temporary file and renamed, so a crash mid-write leaves the previous ones
intact; only the last `keep` are kept. The data position is the step itself, because the batch
at a step is a pure function of (seed, step) — see `lmlab.data.blocks.batch_starts`.
"""

import pickle
import random
import re
import zipfile
from pathlib import Path

import numpy as np
import torch

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path

_NAME = re.compile(r"step_(\d+)\.pt$")


def rng_state() -> dict:
    """Every random generator a training step may draw from."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory: Path, step: int, state: dict, keep: int) -> Path:
    """Write `state` (plus RNG states) as step_{step}.pt atomically; delete all but the newest `keep`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step_{step:07d}.pt"
    with atomic_path(path) as tmp:
        torch.save(state | {"step": step, "rng": rng_state()}, tmp)
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if _NAME.search(p.name)), key=lambda p: int(_NAME.search(p.name)[1]))


def resume_checkpoint(out: Path, resume: bool) -> dict | None:
    """The newest checkpoint of the run in `out` when resuming, None for a new run. Refuses to
    start a new run over an old one, and to resume a run that has no checkpoint."""
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
    """Read a checkpoint; a corrupt or truncated file is an LmlabError naming it."""
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as e:
        raise LmlabError(f"checkpoint {path} is corrupt or truncated ({type(e).__name__}); delete it to resume "
                         "from the one before, or start again without --resume") from None
