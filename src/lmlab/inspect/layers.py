"""The residual stream, layer by layer: read it (logit lens, probing) or overwrite one position of it
(activation patching), in any transformer lmlab builds, without changing the model's code.

A stack is a sequence of block calls: a decoder's or a BERT encoder's `blocks`, ALBERT's one shared
`block` called once per layer, an encoder-decoder's `encoder` or `decoder` stack. "Layer 0" is what the
first block reads (token embeddings, plus positions where they are added); layer i is what block i
writes. Forward hooks on the blocks see it all, so the same code serves every family.

The tools read one text at a time (a batch of one, no padding): the states are then (T, C), whether the
blocks run on (1, T, C) or, as the unpadded encoders do, on packed (T, C) tokens.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from lmlab.errors import LmlabError

STACKS = ("encoder", "decoder")  # the two stacks of an encoder-decoder


def stack_blocks(model: nn.Module, stack: str | None = None) -> list[nn.Module]:
    """The block called at each layer of `model` (the same module repeated for ALBERT). An
    encoder-decoder needs `stack`: "encoder" or "decoder"."""
    if hasattr(model, "encoder") and hasattr(model, "decoder"):
        if stack not in STACKS:
            raise LmlabError(f"an encoder-decoder has two stacks; name one: {', '.join(STACKS)}")
        return list(getattr(model, stack).blocks)
    if stack not in (None, "decoder" if hasattr(model, "lm_head") else "encoder"):
        raise LmlabError(f"this model has a single stack; there is no {stack} stack to read")
    if hasattr(model, "blocks"):
        return list(model.blocks)
    if hasattr(model, "block") and hasattr(model, "n_layers"):
        return [model.block] * model.n_layers
    raise LmlabError(f"{type(model).__name__} is not a transformer stack lmlab can inspect")


def _as_tokens(x: torch.Tensor) -> torch.Tensor:
    """A block's hidden states for one text, (1, T, C) or packed (T, C), as (T, C)."""
    if x.dim() == 3:
        if x.size(0) != 1:
            raise LmlabError("layer inspection reads one text at a time")
        return x[0]
    return x


def _state(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


@contextmanager
def recording(model: nn.Module, stack: str | None = None) -> Iterator[list[torch.Tensor]]:
    """Inside the block, a forward pass of one text fills the yielded list with the n_layers + 1
    residual states, each (T, C): layer 0 (the first block's input), then each block's output. The
    next pass starts the list afresh."""
    blocks = stack_blocks(model, stack)
    states: list[torch.Tensor] = []

    def before(module, args):
        if len(states) in (0, len(blocks) + 1):  # a pass begins
            states.clear()
            states.append(_as_tokens(args[0]))

    def after(module, args, output):
        states.append(_as_tokens(_state(output)))

    with _hooks(blocks, before, after):
        yield states


@contextmanager
def patching(model: nn.Module, layer: int, position: int, value: torch.Tensor,
             stack: str | None = None) -> Iterator[None]:
    """Inside the block, every forward pass of one text runs with the residual state of `layer`
    (0 = the first block's input) at `position` replaced by `value` (C,): causal tracing's restore."""
    blocks = stack_blocks(model, stack)
    if not 0 <= layer <= len(blocks):
        raise LmlabError(f"layer {layer} is out of range: the model has layers 0..{len(blocks)}")
    calls = 0

    def replaced(x: torch.Tensor) -> torch.Tensor:
        tokens = _as_tokens(x)
        if not 0 <= position < tokens.size(0):
            raise LmlabError(f"position {position} is out of range for a text of {tokens.size(0)} tokens")
        tokens = tokens.clone()
        tokens[position] = value
        return tokens.view_as(x)

    def before(module, args):
        nonlocal calls
        calls = calls % len(blocks) + 1  # block calls of this pass, 1..n_layers
        if layer == 0 and calls == 1:
            return (replaced(args[0]), *args[1:])
        return None

    def after(module, args, output):
        if layer >= 1 and calls == layer:
            state = replaced(_state(output))
            return (state, *output[1:]) if isinstance(output, tuple) else state
        return None

    with _hooks(blocks, before, after):
        yield


@contextmanager
def _hooks(blocks: list[nn.Module], before, after) -> Iterator[None]:
    """`before` as a pre-hook and `after` as a forward hook on each distinct block, removed on exit."""
    handles = []
    try:
        for block in dict.fromkeys(blocks):  # ALBERT's one block is hooked once and fires at every layer
            handles.append(block.register_forward_pre_hook(before))
            handles.append(block.register_forward_hook(after))
        yield
    finally:
        for handle in handles:
            handle.remove()
