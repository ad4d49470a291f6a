"""Data-parallel training under `torchrun`: one process per device, gradients averaged.

`torchrun --nproc_per_node N -m lmlab.cli.main sft …` sets RANK / WORLD_SIZE / LOCAL_RANK; the
first `current()` call then joins the process group (gloo for CPU tensors, nccl for CUDA ones where
torch has it),
which is left when the process exits. Without torchrun everything here is a no-op and training
runs in one process.
"""

import atexit
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()


def current() -> Dist:
    """This process's place in a torchrun launch (joining its process group on the first call), or
    the single process `Dist()` when torchrun did not start it. On a GPU machine each process takes
    the GPU of its LOCAL_RANK, so `--device auto` and `cuda` mean that one."""
    if "RANK" not in os.environ:
        return Dist()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if not dist.is_initialized():
        dist.init_process_group(backend())
        atexit.register(_leave)
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank)
    return Dist(dist.get_rank(), dist.get_world_size(), local_rank)


def backend() -> str:
    """gloo for CPU tensors, and nccl for CUDA ones where torch has it."""
    return "cpu:gloo,cuda:nccl" if dist.is_nccl_available() else "gloo"


def average_gradients(parameters: list[torch.nn.Parameter], d: Dist) -> None:
    """Replace each parameter's gradient by its mean over the processes, in one flat all-reduce per
    device (a parameter without a gradient on this process counts as zero). Called after the
    backward passes of a step, so every process then takes the same optimizer step."""
    if d.world_size == 1:
        return
    for p in parameters:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for p in parameters:
        by_device.setdefault(p.grad.device, []).append(p.grad)
    for grads in by_device.values():
        flat = torch.cat([g.reshape(-1) for g in grads])  # (sum of numels,)
        dist.all_reduce(flat)
        flat /= d.world_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def mean_over_processes(values: dict[str, float], d: Dist) -> dict[str, float]:
    """Each value averaged over the processes (every process passes the same keys): the logged
    loss of a step is the global batch's, not one process's share of it."""
    if d.world_size == 1 or not values:
        return values
    keys = sorted(values)
    t = torch.tensor([values[k] for k in keys], dtype=torch.float64)  # a CPU tensor: reduced over gloo
    dist.all_reduce(t)
    return dict(zip(keys, (t / d.world_size).tolist()))


def any_process(flag: bool, d: Dist) -> bool:
    """True on every process if it is true on one, so all stop at the same step (Ctrl-C reaches
    them at slightly different times)."""
    if d.world_size == 1:
        return flag
    t = torch.tensor([float(flag)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
