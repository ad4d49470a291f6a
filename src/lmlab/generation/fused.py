"""A whole decoding step of a quantized Llama-style decoder in one C++ call (`kernels/decoder_step.cpp`).

Eagerly, a one-token step of SmolLM2-135M in int4 runs 121 quantized matrix-vector products (about
5.5 ms on two cores) and some 600 small torch ops around them from Python (another 6-7 ms): each norm,
rotation, cache write, attention and residual is a dispatch and an allocation for a few hundred
numbers. The fused step runs the same maths over the same tensors (the model's quantized buffers,
norm weights, rotary tables and KV cache) in one call, with the same kernels for the products.

It serves a model only when the model is exactly what the C++ computes, and says None otherwise:
pre-norm blocks with RMSNorm, self-attention with rotary positions (grouped-query heads allowed),
SwiGLU, and every matrix (qkv, out, gate_up, down, the LM head) an int8 / int4 `QuantizedLinear`
without bias; fp32 on the CPU, the kernels built, no additive positions, no dropout in training mode,
no attention maps asked for, no forward hooks. Rows may sit at different positions (a left-padded batch, the serving
engine's slots). Anything else decodes through the modules as before (compiled, for a `compiled_decoder`
view), with the same results: the fused step's greedy tokens equal the eager ones
(tests/generation/test_fused.py).
"""

from collections.abc import Callable

import torch
from torch import nn

from lmlab.modules.attention import SelfAttention
from lmlab.modules.feed_forward import SwiGLU
from lmlab.modules.kernels.build import kernel_ops
from lmlab.modules.norms import RMSNorm
from lmlab.modules.positions import RotaryEmbedding
from lmlab.modules.quantized import QuantizedLinear
from lmlab.modules.transformer import PreNormBlock, TransformerDecoder

Step = Callable[[torch.Tensor, list[torch.Tensor], list[torch.Tensor], list[int], list[int] | None], torch.Tensor]


def fused_step(model: nn.Module) -> Step | None:
    """A decoding step `step(ids (B,), k, v, positions, columns=None) -> logits (B, V)` that runs `model`'s whole
    stack in one C++ call; None when the model is not one it computes exactly (see the module's docstring)
    or the kernels are not built. k and v are the cache's per-layer buffers (rows >= B, H_kv, max_len, D):
    row b's new token sits at position positions[b], its key and value go to column columns[b] of its row
    (default: the position; the caller then advances the cache), and it attends to the positions[b] + 1
    columns ending there. Used by `decode_steps` (every row at the cache's length, left-padded rows
    starting later) and by the serving engine (each slot at its own length)."""
    ops = kernel_ops() if _fits(model) else None
    if ops is None:
        return None
    weights, groups = _arguments(model)
    attention = model.blocks[0].attention
    scale = attention.scale if attention.scale is not None else attention.head_dim ** -0.5
    eps = model.norm.eps

    def step(ids: torch.Tensor, k: list[torch.Tensor], v: list[torch.Tensor], positions: list[int],
             columns: list[int] | None = None) -> torch.Tensor:
        x = model.token_embedding(ids)  # (B, C)
        return ops.decoder_step(x, weights, groups, k, v, positions, positions if columns is None else columns,
                                model.rotary.cos, model.rotary.sin, attention.n_heads, attention.n_kv_heads, eps,
                                scale)  # (B, V)

    return step


def _fits(model: nn.Module) -> bool:
    """Whether `model` is exactly the decoder `decoder_step.cpp` computes, with no forward hook on any module
    (prompt tuning, the inspect tools): the C++ would run past them."""
    if not (type(model) is TransformerDecoder and model.positions is None and type(model.rotary) is RotaryEmbedding
            and type(model.norm) is RMSNorm and _quantized(model.lm_head) and model.rotary.cos.is_cpu
            and model.rotary.cos.dtype == torch.float32 and (not model.training or model.dropout.p == 0)
            and model.embedding_scale == 1.0 and model.logit_softcap is None and model.local_rotary is None
            and set(model.windows) == {None} and not _hooked(model)):
        return False
    first = model.blocks[0].attention if len(model.blocks) else None
    return first is not None and all(_block_fits(block, first, model) for block in model.blocks)


def _hooked(model: nn.Module) -> bool:
    """Whether a forward hook would run in some module of `model` (its own, or one set for every module)."""
    from torch.nn.modules import module as torch_module

    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def _block_fits(block: nn.Module, first: SelfAttention, model: TransformerDecoder) -> bool:
    attention, ff = block.attention, block.feed_forward
    return (type(block) is PreNormBlock and type(block.norm1) is RMSNorm and type(block.norm2) is RMSNorm
            and block.norm1.eps == block.norm2.eps == model.norm.eps
            and type(block.post_norm1) is nn.Identity and type(block.post_norm2) is nn.Identity
            and (not block.training or block.dropout.p == 0)
            and type(attention) is SelfAttention and attention.core is None and not attention.need_weights
            and attention.q_norm is None and attention.softcap is None
            and (not attention.training or attention.dropout == 0)
            and (attention.n_heads, attention.n_kv_heads, attention.head_dim, attention.scale)
            == (first.n_heads, first.n_kv_heads, first.head_dim, first.scale)
            and attention.head_dim == model.rotary.cos.size(1)
            and type(ff) is SwiGLU
            and all(_quantized(layer) for layer in (attention.qkv, attention.out, ff.gate_up, ff.down)))


def _quantized(layer: nn.Module) -> bool:
    """An int8 / int4 linear layer without bias whose tensors the kernels read as they are."""
    return (type(layer) is QuantizedLinear and layer.bias is None and layer.qweight.is_cpu
            and layer.qweight.is_contiguous() and layer.scales.is_contiguous()
            and (layer.mins is None or layer.mins.is_contiguous()))


def _arguments(model: TransformerDecoder) -> tuple[list[torch.Tensor | None], list[int]]:
    """decoder_step's flat weight list (per layer: norm1, qkv, out, norm2, gate_up, down, each matrix as q,
    scales, mins; then the final norm and the head) and the group size of every matrix."""
    weights, groups = [], []
    for block in model.blocks:
        attention, ff = block.attention, block.feed_forward
        weights.append(block.norm1.weight.detach())
        for layer in (attention.qkv, attention.out):
            weights += [layer.qweight, layer.scales, layer.mins]
        weights.append(block.norm2.weight.detach())
        for layer in (ff.gate_up, ff.down):
            weights += [layer.qweight, layer.scales, layer.mins]
        groups += [layer.group_size for layer in (attention.qkv, attention.out, ff.gate_up, ff.down)]
    weights += [model.norm.weight.detach(), model.lm_head.qweight, model.lm_head.scales, model.lm_head.mins]
    groups.append(model.lm_head.group_size)
    return weights, groups
