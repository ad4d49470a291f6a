"""Opt-in `torch.compile` of the one-token decoding step of a `TransformerDecoder`.

A decoding step of a small model on the CPU is overhead-bound: SmolLM2-135M in int4 spends 5.5 ms
of a 12.4 ms eager step in its matmuls and the rest running some 600 small ops from Python. Inductor
fuses those into a few generated C++ loops around the matmuls (and our quantized kernels, which
trace through their registered fake kernels): 8.9 ms a step (2 threads, docs/quantization.md).

The step is `last_logits` on the model's `decoding_view`, compiled once per process with dynamic
shapes: the cache length (and so the KV buffers' and the mask's sizes) is a symbol, not a constant,
so the growing cache and new prompt lengths reuse one graph. A new batch size, or a padded batch
after an unpadded one, compiles once more. The first compile takes tens of seconds; inductor keeps
its generated code in `$LMLAB_CACHE/inductor` (default ~/.cache/lmlab/inductor), which brings
later processes down to a few seconds. The prompt itself runs eagerly (one big matmul per layer,
nothing to gain).
"""

import copy
import functools
import os

import torch
from torch import nn

from lmlab.generation.decode import last_logits
from lmlab.io.cache import cache_dir


def compiled_decoder(model: nn.Module) -> nn.Module:
    """`model` (a `TransformerDecoder`) as a view that shares its weights and behaves the same, except
    that `decode_steps` runs its one-token steps compiled. The greedy tokens are the eager ones."""
    view = copy.copy(model)  # a new object sharing the model's modules, parameters and settings
    view.decode_step = _compiled_step
    return view


def _compiled_step(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None, cache,
                   positions: torch.Tensor | None = None) -> torch.Tensor:
    """`last_logits`, compiled. Floats (norm eps, dropout p) stay constants: with dynamic=True dynamo would
    first trace them as symbols, find it cannot, and trace the whole model again (~half the compile time)."""
    compiled = _compiled_last_logits()  # before torch._dynamo is first imported (which fixes inductor's cache)
    with torch._dynamo.config.patch(specialize_float=True):
        return compiled(model, ids, mask, cache, positions)


@functools.cache
def _compiled_last_logits():
    """torch.compile(last_logits), made on first use: inductor fixes its cache directory when torch._dynamo
    is first imported, so it is pointed at the lmlab cache just before (unless the user chose one)."""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir("inductor"))
    return torch.compile(last_logits, dynamic=True)
