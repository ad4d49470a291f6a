"""How much memory a decoder's training run needs on each process, estimated before it starts.

Four parts, in bytes (fp32 weights):
- weights, gradients and AdamW's two moments: 4 + 4 + 8 bytes a trainable parameter (4 for a
  frozen one), all on every process under data parallelism (plus one flat copy of the gradients
  for their all-reduce), 1/N of each per process with `--fsdp`, which instead gathers one block's
  whole weights and gradients at a time (two blocks: the next is fetched while one computes) and
  keeps the embeddings and head whole through the step;
- activations kept for the backward pass, per token of the micro-batch. The per-layer counts are
  what lmlab's blocks save (measured with `torch.autograd.graph.saved_tensors_hooks`, and checked
  against that measure in the tests): 8 d_model (the norms' inputs and outputs, the attention's
  input, output and q), 2 d_ff for a GELU FFN (its input and activation) or 4 d_ff for SwiGLU (gate,
  up, their product and the activation), 3 kv widths for rotary positions (the rotated q and k,
  and v copied out of the fused projection) and the attention's log-sum-exp per head. bf16 autocast
  keeps most of them in 2 bytes.

What it leaves out: dropout masks (1 byte an element where dropout is on), the allocator's slack
and the framework itself (a few hundred MB of CUDA context on a GPU).
"""

import re
from dataclasses import dataclass

from torch import nn

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.training import distributed

GIB = 2**30
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes each process needs to train, by part."""

    weights: int
    gradients: int
    optimizer: int
    gathered: int  # FSDP: whole weights and gradients of the blocks being computed, and the embeddings
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.gathered + self.activations

    def describe(self) -> str:
        parts = [("weights", self.weights), ("gradients", self.gradients), ("AdamW", self.optimizer),
                 ("gathered", self.gathered), ("activations", self.activations)]
        return " + ".join(f"{name} {size(n)}" for name, n in parts if n) + f" = {size(self.total)}"


def estimate_memory(model: nn.Module, micro_batch: int, tokens: int, processes: int = 1, fsdp: bool = False,
                    bf16: bool = False) -> MemoryEstimate:
    """The memory a process needs to train decoder `model` (its `config` is a ModelConfig) on
    micro-batches of `micro_batch` x `tokens` with `processes` processes, sharded with `fsdp`."""
    params = {id(p): p for p in model.parameters()}.values()  # tied weights once
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    cfg: ModelConfig = model.config
    shards = processes if fsdp else 1
    gathered = 0
    if fsdp:
        block = sum(p.numel() for p in model.blocks[0].parameters())
        outside = total - sum(p.numel() for p in model.blocks.parameters())
        gathered = 4 * (2 * 2 * block + outside)  # two blocks' weights and gradients, the rest whole
    gradients = 4 * trainable // shards + (4 * trainable if processes > 1 and not fsdp else 0)
    return MemoryEstimate(weights=4 * total // shards, gradients=gradients, optimizer=8 * trainable // shards,
                          gathered=gathered, activations=activation_bytes(cfg, micro_batch * tokens, bf16))


def activation_bytes(cfg: ModelConfig, tokens: int, bf16: bool = False) -> int:
    """Bytes of the activations a forward pass over `tokens` tokens keeps for the backward pass."""
    kv_width = (cfg.n_kv_heads or cfg.n_heads) * cfg.head_dim
    ffn = (4 if cfg.ffn == "swiglu" else 2) * cfg.d_ff
    rotary = 3 * kv_width if cfg.positions == "rope" else 0
    per_layer = 8 * cfg.d_model + ffn + rotary + 2 * cfg.n_heads  # values a token keeps in each block
    per_token = cfg.n_layers * per_layer + 2 * cfg.d_model  # and the final norm's input and output
    return tokens * per_token * (2 if bf16 else 4)


def check_memory(model: nn.Module, batch_size: int, grad_accum: int, tokens: int, fsdp: bool, bf16: bool,
                 max_memory: str | None) -> MemoryEstimate:
    """What each process needs to train decoder `model` (global `batch_size` cut into processes x
    `grad_accum` micro-batches of at most `tokens` tokens); a run over `max_memory` (a size such
    as "8GiB") is refused in one line. Run it before anything is written: `model` may be on the meta
    device. The training session prints the estimate once the run starts."""
    processes = distributed.current().world_size
    micro_batch = max(1, batch_size // (processes * grad_accum))
    estimate = estimate_memory(model, micro_batch, tokens, processes, fsdp, bf16)
    if max_memory is None or estimate.total <= parse_size(max_memory):
        return estimate
    raise LmlabError(f"training needs about {size(estimate.total)} per process ({estimate.describe()}), more than "
                     f"--max-memory {max_memory}; lower --batch-size or raise --grad-accum, shorten --block-size, "
                     "or shard over more processes with --fsdp")


def parse_size(text: str) -> int:
    """Bytes in a size such as "8GiB", "512MB" or "1.5gb" (a bare number is bytes)."""
    match = _SIZE.match(text)
    if not match or match[2].lower() not in _UNITS:
        raise LmlabError(f"--max-memory {text!r} is not a size; write it as 8GiB, 512MiB or 16GB")
    return int(float(match[1]) * _UNITS[match[2].lower()])


def size(n: int) -> str:
    """Bytes as a short human size: 512.0 MiB, 3.2 GiB."""
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / 2**20:.1f} MiB"
