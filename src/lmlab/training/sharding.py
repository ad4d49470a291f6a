"""Fully sharded data parallel training (PyTorch FSDP2): a model larger than one device.

Data parallelism (`distributed`) keeps a whole copy of the weights, gradients and Adam moments on
every process: 16 bytes a parameter in fp32. `shard` splits each of them over the N processes
instead (`fully_shard` on every transformer block, then on the whole model), so a process holds
1/N of each, plus the one block whose weights are gathered while it computes. The loop then trains
as before: FSDP averages the gradients itself (a reduce-scatter), so `average_gradients` is skipped.

A sharded model's checkpoint is sharded too: every process writes its own pieces with
`torch.distributed.checkpoint` into safetensors files whose header says which slice of which tensor
each holds (`HuggingFaceStorageWriter`), and any number of processes reads them back, each taking
the slices it now owns (`HuggingFaceStorageReader`). Nothing in them is unpickled: torch's default
checkpoint reader unpickles its metadata file, this one reads JSON headers. What is not a tensor
(the step, the schedule, RNG states, settings, the optimizer's hyperparameters) goes into the
run's ordinary checkpoint file beside them: checkpoints/step_N.pt and checkpoints/step_N.shards/,
one file per process that wrote it. Every process writes into the run directory, so on several
machines it must be a shared filesystem. At the end the whole weights are gathered onto the first
process's CPU (`unsharded`) and saved as any model directory.

`--fsdp` in one process (without torchrun) joins a process group of one, so a sharded run can be
resumed anywhere.
"""

import contextlib
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors import SafetensorError, safe_open
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method

from lmlab.errors import LmlabError
from lmlab.modules.transformer import TransformerDecoder
from lmlab.training import distributed

SHARDED = "a decoder: lmlab train with a decoder preset, and sft and dpo with --peft none"


def shard(module: TransformerDecoder) -> None:
    """Shard decoder `module` over the processes in place: each block, then the rest (embeddings,
    final norm, head) as one group. Joins a process group of one when torchrun did not start this
    process."""
    if not isinstance(module, TransformerDecoder):
        raise LmlabError(f"--fsdp shards {SHARDED}; this run trains a {type(module).__name__}: drop --fsdp")
    if not dist.is_initialized():
        dist.init_process_group(distributed.backend(), store=dist.HashStore(), rank=0, world_size=1)
    for block in module.blocks:
        fully_shard(block)
    fully_shard(module)
    register_fsdp_forward_method(module, "hidden_states")  # the loss's entry point besides forward


def decoder_only(fsdp: bool, max_memory: str | None, what: str) -> None:
    """Refuse, before anything is written, the settings only a decoder's training has: --fsdp and
    --max-memory (whose estimate counts a decoder's activations), for `what` ("encoder pre-training")."""
    if fsdp or max_memory is not None:
        flag = "--fsdp" if fsdp else "--max-memory"
        raise LmlabError(f"{flag} is for {SHARDED}, not {what}; drop it")


def is_sharded(module: nn.Module) -> bool:
    return isinstance(module, FSDPModule)


def reshard(module: nn.Module) -> None:
    """Free the gathered weights of every sharded part of `module` (nothing when it is not sharded).
    The whole-model group stays gathered after a forward pass, for the loss's head, until backward;
    after a forward without backward (evaluation, generation) they must be dropped by hand."""
    for part in module.modules():
        if isinstance(part, FSDPModule):
            part.reshard()


def grad_norm(norm: torch.Tensor) -> float:
    """The total gradient norm `clip_grad_norm_` returned, as a float (a DTensor when sharded)."""
    return (norm.full_tensor() if hasattr(norm, "full_tensor") else norm).item()


def _tensors(module: nn.Module, optimizer: torch.optim.Optimizer, trainable: dict) -> tuple[dict, dict]:
    """What a sharded checkpoint stores, as this process's shards: {"model": trainable weights,
    "optim": the optimizer's per-parameter tensors}, and the optimizer's full state dict."""
    optim = get_optimizer_state_dict(module, optimizer)
    return {"model": trainable, "optim": optim["state"]}, optim


def save_shards(module: nn.Module, optimizer: torch.optim.Optimizer, trainable: dict, path: Path,
                is_main: bool) -> list:
    """Every process writes its shards of `trainable` (name -> DTensor) and of the optimizer state into
    `path` (…/step_N.shards): first into a partial directory, renamed by the first process once all
    have written. Returns the optimizer's param_groups (plain data) for the checkpoint file."""
    partial = path.with_name(path.name + ".partial")
    if is_main:
        shutil.rmtree(partial, ignore_errors=True)  # a save killed midway
    dist.barrier()
    tensors, optim = _tensors(module, optimizer, trainable)
    dcp.save(tensors, storage_writer=dcp.HuggingFaceStorageWriter(str(partial), save_distributed=True))
    dist.barrier()
    if is_main:
        shutil.rmtree(path, ignore_errors=True)
        partial.rename(path)
    dist.barrier()
    return optim["param_groups"]


def load_shards(module: nn.Module, optimizer: torch.optim.Optimizer, trainable: dict, path: Path,
                param_groups: list) -> None:
    """Read this process's slices of the weights and optimizer state from `path` (written by any
    number of processes) into the sharded `module` and `optimizer`."""
    if not path.is_dir():
        raise LmlabError(f"{path} is missing: the checkpoint beside it was written by a sharded (--fsdp) run and "
                         "its tensors lie there; restore the directory, or start again without --resume")
    for file in sorted(path.glob("*.safetensors")):  # headers first: DCP would log a traceback for a bad one
        try:
            with safe_open(file, "pt"):
                pass
        except (SafetensorError, OSError) as e:
            raise LmlabError(f"{file} is not a safetensors file ({e}); the checkpoint's shards are damaged: "
                             "delete the checkpoint to resume from the one before, or start again without "
                             "--resume") from None
    tensors, optim = _tensors(module, optimizer, trainable)
    reader = dcp.HuggingFaceStorageReader(str(path))
    _check_complete(tensors, reader.read_metadata().state_dict_metadata, path)
    try:
        with _quiet(logging.getLogger("torch.distributed.checkpoint")):
            dcp.load(tensors, storage_reader=reader)
    except (Exception, CheckpointException) as e:  # a missing tensor or slice, a wrong shape
        raise LmlabError(f"the shards in {path} do not hold this model's weights and optimizer state "
                         f"({type(e).__name__}); resume with the settings the run started with") from None
    set_optimizer_state_dict(module, optimizer, {"state": optim["state"], "param_groups": param_groups})



def _check_complete(tensors: dict, saved: dict, path: Path, prefix: str = "") -> None:
    """Refuse shards that do not cover every element of every tensor in `tensors` (nested by name,
    as DCP flattens them: "model.blocks.0.…"), as when one process's file is missing: DCP would
    leave those slices as they were."""
    for name, value in tensors.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            _check_complete(value, saved, path, f"{key}.")
            continue
        stored = saved.get(key)
        covered = sum(torch.Size(chunk.sizes).numel() for chunk in stored.chunks) if stored is not None else 0
        if stored is None or tuple(stored.size) != tuple(value.shape) or covered != value.numel():
            raise LmlabError(f"the shards in {path} do not hold this model's weights and optimizer state ({key} is "
                             "missing or incomplete: a process's file is gone, or another run wrote them); resume "
                             "with the settings the run started with, or delete the checkpoint to resume from the "
                             "one before")


def unsharded(module: nn.Module, build: Callable[[], nn.Module]) -> nn.Module | None:
    """`module` whole, to save: itself when it is not sharded; else its full weights gathered (a
    collective: every process calls this) into `build()`, a fresh copy on the first process's CPU,
    and None on the others."""
    if not is_sharded(module):
        return module
    weights = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() != 0:
        return None
    whole = build()
    whole.load_state_dict(weights)
    return whole


@contextlib.contextmanager
def _quiet(logger: logging.Logger):
    """Silence `logger` (DCP logs each failure's traceback before raising it; lmlab says one line)."""
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)
