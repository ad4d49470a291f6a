"""A task head's own weights beside the model it sits on (a fine-tuned encoder's head.safetensors, a reward
model's reward_head.safetensors), read back checked: the names and shapes the head expects, finite values."""

from pathlib import Path

import torch
from safetensors.torch import load_file

from lmlab.errors import LmlabError
from lmlab.io.weight_checks import check_finite, safetensors_header


def read_head_state(path: Path, expected: dict[str, torch.Tensor], fix: str) -> dict[str, torch.Tensor]:
    """The head's tensors in `path`, refused unless their names and shapes are those of `expected`
    (the state dict of the head the run describes) and their values finite; each refusal one line
    ending with `fix`. The header is checked before a byte of weights is read."""
    if not path.is_file():
        raise LmlabError(f"{path} is missing; {fix}")
    header = safetensors_header([path])
    if header.keys() != expected.keys():
        raise LmlabError(f"{path} holds tensors {sorted(header)[:4]}, not the head's {sorted(expected)}; {fix}")
    for name, tensor in expected.items():
        if header[name].shape != tensor.shape:
            raise LmlabError(f"{path}: {name} has shape {tuple(header[name].shape)} but the model's width and "
                             f"the run's labels need {tuple(tensor.shape)}; {fix}")
    state = load_file(path)
    check_finite(state, str(path))
    return state
