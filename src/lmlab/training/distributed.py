"""Data-parallel training under `torchrun`: one process per device, gradients all-reduced.

`torchrun --nproc_per_node N -m lmlab.cli.main train …` sets RANK / WORLD_SIZE / LOCAL_RANK;
without them everything here is a no-op and training runs in one process.
"""

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


def setup(device: str) -> Dist:
    """Join the process group if launched by torchrun (gloo on CPU, nccl on GPU)."""
    if "RANK" not in os.environ:
        return Dist()
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend)
    d = Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    if backend == "nccl":
        torch.cuda.set_device(d.local_rank)
    return d


def teardown(d: Dist) -> None:
    if d.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()
