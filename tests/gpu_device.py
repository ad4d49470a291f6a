"""The device the GPU tests (tests/gpu) run on, and what they share to compare it with the CPU.

The device is CUDA when torch sees a GPU; without one the tests are skipped. `LMLAB_GPU_TESTS_DEVICE=cpu`
(or any torch device) runs them there instead, so that a machine without a GPU checks their code paths and
assertions; each comparison is then the CPU against itself.
"""

import copy
import json
import os
from pathlib import Path

import pytest
import torch
from torch import nn


def chosen_device() -> torch.device | None:
    """LMLAB_GPU_TESTS_DEVICE when set, else CUDA when there is a GPU, else None (the tests are skipped)."""
    chosen = os.environ.get("LMLAB_GPU_TESTS_DEVICE")
    if chosen:
        return torch.device(chosen)
    return torch.device("cuda") if torch.cuda.is_available() else None


DEVICE = chosen_device()
# The mark every module of tests/gpu carries.
on_device = pytest.mark.skipif(DEVICE is None, reason="no CUDA device (LMLAB_GPU_TESTS_DEVICE=cpu runs these "
                                                      "tests on the CPU)")


def on(model: nn.Module, device: torch.device | None = DEVICE) -> nn.Module:
    """A copy of `model` on `device` (the CPU original stays the reference)."""
    return copy.deepcopy(model).to(device)


def losses(run: Path, key: str = "loss") -> dict[int, float]:
    """step -> `key` of every row of a run's metrics.jsonl that logged it."""
    rows = [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row[key] for row in rows if key in row}
