"""Which device a run trains on: `--device auto` takes a GPU when there is one."""

import torch

from lmlab.errors import LmlabError
from lmlab.training import distributed
from lmlab.training.host_memory import keep_freed_memory


def pick_device(device: str) -> torch.device:
    """The torch device for a `--device` value (auto, cpu, cuda, cuda:1, …)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LmlabError(f"device '{device}' asked for but CUDA is not available; use --device cpu")
    return torch.device(device)


def training_device(device: str) -> torch.device:
    """`pick_device` for a training run: under torchrun the process joins its group first, which gives
    it the GPU of its LOCAL_RANK; on a CPU, the memory a step frees is also kept for the next step
    (`keep_freed_memory`), so steps do not page-fault their activations back in."""
    distributed.current()
    dev = pick_device(device)
    keep_freed_memory(dev)
    return dev
