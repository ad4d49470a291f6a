"""A whole decoding step of a quantized Llama-style decoder in one C++ call (`kernels/decoder_step.cpp`).

Eagerly, a one-token step of SmolLM2-135M in int4 runs 121 quantized matrix-vector products (about
5.5 ms on two cores) and some 600 small torch ops around them from Python (another 6-7 ms): each norm,
rotation, cache write, attention and residual is a dispatch and an allocation for a few hundred
numbers. The fused step runs the same maths over the same tensors (the model's quantized buffers,
norm weights, rotary tables and KV cache) in one call, with the same kernels for the products.
It takes one new token per row (decoding) or several (speculative decoding's check of its drafts): the
kernels unpack each weight once for all the rows, but each row still costs its multiply-adds (int4 is
compute-bound), so on SmolLM2-135M in int4 (one thread, Zen 4) a call over 2 / 3 / 4 / 6 tokens costs
about 1.4 / 1.9 / 2.3 / 4.1 one-token calls, where the modules' pass over them costs 2.4 / 3.5 / 3.1 / 5.4.

It serves a model only when the model is exactly what the C++ computes, and says None otherwise
(`fused_step_refusal` says why, in a few words): pre-norm blocks with RMSNorm, self-attention with rotary
positions (grouped-query heads allowed), a gated feed-forward (SwiGLU, or GeGLU's tanh GELU), and every
matrix (qkv, out, gate_up, down, the LM head) an int8 / int4 `QuantizedLinear`, with or without a bias, its
input kept fp32 or rounded to 8 bits as llama.cpp rounds it (`--activations int8`: integer products);
fp32 on the CPU, the kernels built, no additive positions, no dropout in training mode, no attention maps
asked for, no forward hooks. The settings of today's Llama-like families are in: q/k/v biases (Qwen2), q/k
norms per head (Qwen3, Gemma 3) or over all heads (OLMo 2), a head size of its own, norms on each sublayer's
output with or without the pre-norms (Gemma's sandwich, OLMo 2), an embedding scale, an attention scale,
attention and final logit soft-capping (Gemma 2), a sliding window per layer (Mistral, Phi-3, Gemma) and the
local layers' own rotary table (Gemma 3). Rows may sit at different positions (a left-padded batch, the
serving engine's slots). Anything else decodes through the modules as before (compiled, for a
`compiled_decoder` view), with the same results: the fused step's greedy tokens equal the eager ones
(tests/generation/test_fused.py).
"""

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.modules.activation_rounding import KERNEL_CODES
from lmlab.modules.attention import SelfAttention
from lmlab.modules.feed_forward import GatedMLP, SwiGLU
from lmlab.modules.kernels.build import kernel_ops
from lmlab.modules.norms import AllHeadsRMSNorm, RMSNorm
from lmlab.modules.positions import RotaryEmbedding
from lmlab.modules.quantized import QuantizedLinear
from lmlab.modules.transformer import PreNormBlock, TransformerDecoder

Step = Callable[[torch.Tensor, list[torch.Tensor], list[torch.Tensor], list[int], list[int] | None], torch.Tensor]

SILU, GELU_TANH = 0, 1  # decoder_step's codes of the gated feed-forward's activation


def fused_step(model: nn.Module) -> Step | None:
    """A decoding step `step(ids (B,), k, v, positions, columns=None) -> logits (B, V)` that runs `model`'s whole
    stack in one C++ call; None when the model is not one it computes exactly (`fused_step_refusal` says why)
    or the kernels are not built. k and v are the cache's per-layer buffers (rows >= B, H_kv, max_len, D):
    row b's new token sits at position positions[b], its key and value go to column columns[b] of its row
    (default: the position; the caller then advances the cache), and it attends to the positions[b] + 1
    columns ending there, or in a layer with a sliding window to the latest `window` of them, which is all a
    cache that dropped older keys holds (`KVCache.keep_last`: a column is then behind its position). Used by
    `decode_steps` (every row at the cache's length, left-padded rows starting later) and by the serving
    engine (each slot at its own length).

    ids (B, T) give each row T new tokens at positions[b] .. positions[b] + T - 1 (and as many columns), each
    attending causally to the ones before it and the cache, and the logits (B, T, V) after each: speculative
    decoding checks its drafts so (`speculative.py`), streaming the weights once for all B T tokens as one
    token's step does, where the modules' forward pass costs as much again in small torch ops."""
    if fused_step_refusal(model) is not None:
        return None
    ops = kernel_ops()
    weights, groups, roundings = _arguments(model)
    attention = model.blocks[0].attention
    scale = attention.scale if attention.scale is not None else attention.head_dim ** -0.5
    local = model.local_rotary or model.rotary
    windows = [window or 0 for window in model.windows]
    settings = (attention.n_heads, attention.n_kv_heads, model.norm.eps, scale, model.embedding_scale,
                attention.softcap or 0.0, model.logit_softcap or 0.0, _feed_forward_code(model.blocks[0].feed_forward))

    def step(ids: torch.Tensor, k: list[torch.Tensor], v: list[torch.Tensor], positions: list[int],
             columns: list[int] | None = None) -> torch.Tensor:
        B, T = ids.size(0), ids.size(1) if ids.dim() == 2 else 1
        columns = positions if columns is None else columns
        x = model.token_embedding(ids.reshape(B * T))  # (B T, C)
        logits = ops.decoder_step(x, weights, groups, roundings, windows, k, v, _each_token(positions, T),
                                  _each_token(columns, T), [b for b in range(B) for _ in range(T)],
                                  model.rotary.cos, model.rotary.sin, local.cos, local.sin, *settings)  # (B T, V)
        return logits.view(B, T, -1) if ids.dim() == 2 else logits

    return step


def _each_token(starts: list[int], T: int) -> list[int]:
    """Each of T new tokens' position (or column) in every row: starts[b], starts[b] + 1, .. starts[b] + T - 1."""
    return [start + t for start in starts for t in range(T)]


def fused_step_refusal(model: nn.Module) -> str | None:
    """Why the fused step does not run `model`, as a clause ("its norms are not RMSNorm (LayerNorm: GPT-2)"), or
    None when it does. `lmlab generate --dtype int8/int4` prints it once, so a user sees which part of the
    model keeps it on the slower path."""
    if type(model) is not TransformerDecoder or not len(model.blocks):
        return "it is not a decoder-only transformer of lmlab's blocks"
    if _hooked(model):
        return "a forward hook is set (prompt tuning, an inspect tool), which the C++ step would run past"
    if any(getattr(layer, "activations", None) not in (None, *KERNEL_CODES) for layer in model.modules()):
        return "its activations are rounded to 16-bit floats (an F16 / BF16 file with --activations int8)"
    reason = _model_refusal(model) or next(filter(None, (_block_refusal(block, model) for block in model.blocks)),
                                             None)
    if reason is None and kernel_ops() is None:
        return "the quantized kernels could not be built (a C++ compiler and ninja are needed)"
    return reason


def _model_refusal(model: TransformerDecoder) -> str | None:
    if model.positions is not None or type(model.rotary) is not RotaryEmbedding:
        return "its positions are not rotary (additive position embeddings: GPT-2)"
    if not model.rotary.cos.is_cpu:
        return "it is not on the CPU"
    if model.training and model.dropout.p:
        return "it is in training mode with dropout"
    if model.rotary.cos.dtype != torch.float32:
        return "its weights are not fp32 around the int8 / int4 matrices"
    if model.local_rotary is not None and (type(model.local_rotary) is not RotaryEmbedding
                                           or model.local_rotary.cos.shape != model.rotary.cos.shape):
        return "its local layers' rotary table is not one of RotaryEmbedding's of the global one's shape"
    if type(model.norm) is not RMSNorm:
        return "its norms are not RMSNorm (LayerNorm: GPT-2)"
    if not _quantized(model.lm_head):
        return _FLOAT_MATRICES
    return None


def _block_refusal(block: nn.Module, model: TransformerDecoder) -> str | None:
    """Why the C++ step does not compute `block` as the modules do, or None; every layer must match the first
    in what the step takes once (heads, head size, scale, soft-cap, activation, norm epsilon)."""
    if type(block) is not PreNormBlock:
        return "its blocks are post-norm (the original Transformer's)"
    attention, ff, first = block.attention, block.feed_forward, model.blocks[0]
    norms = (block.norm1, block.norm2, block.post_norm1, block.post_norm2)
    if not all(type(norm) in (RMSNorm, nn.Identity) for norm in norms):
        return "its norms are not RMSNorm (LayerNorm: GPT-2)"
    if any(isinstance(norm, RMSNorm) and norm.eps != model.norm.eps
           for norm in (*norms, getattr(attention, "q_norm", None), getattr(attention, "k_norm", None))):
        return "its norms have different epsilons"
    if type(attention) is not SelfAttention or attention.core is not None:
        return "its attention is an efficient method (--attention), not full softmax attention"
    if (block.training and block.dropout.p) or (attention.training and attention.dropout):
        return "it is in training mode with dropout"
    if attention.need_weights:
        return "attention maps are being kept (need_weights)"
    if (attention.n_heads, attention.n_kv_heads, attention.head_dim, attention.scale, attention.softcap) != (
            first.attention.n_heads, first.attention.n_kv_heads, first.attention.head_dim, first.attention.scale,
            first.attention.softcap) or attention.head_dim != model.rotary.cos.size(1):
        return "its layers differ in heads, head size, attention scale or soft-cap"
    if not _qk_norms_fit(attention):
        return "its q/k norms are neither per head nor over all heads"
    if _feed_forward_code(ff) is None:
        return "its feed-forward is not gated by SiLU or tanh GELU (a GELU MLP: GPT-2)"
    if _feed_forward_code(ff) != _feed_forward_code(first.feed_forward):
        return "its layers' feed-forward activations differ"
    if not all(_quantized(layer) for layer in (attention.qkv, attention.out, ff.gate_up, ff.down)):
        return _FLOAT_MATRICES
    return None


_FLOAT_MATRICES = ("some of its matrices are float, not int8 / int4 on the CPU (load it with --dtype int8 or int4, "
                   "or a GGUF type that keeps a kernel)")


def _feed_forward_code(ff: nn.Module) -> int | None:
    """decoder_step's code of a gated feed-forward's activation (SwiGLU's SiLU, GeGLU's tanh GELU), None for any
    other feed-forward. By what the activation is, not which object: a copied model holds copies of the partial."""
    if type(ff) is SwiGLU or (type(ff) is GatedMLP and ff.activation is F.silu):
        return SILU
    act = getattr(ff, "activation", None)
    if type(ff) is GatedMLP and isinstance(act, partial) and (act.func, act.args, act.keywords) == (
            F.gelu, (), {"approximate": "tanh"}):
        return GELU_TANH
    return None


def _qk_norms_fit(attention: SelfAttention) -> bool:
    """No q/k norms, or an RMSNorm of each head (a weight of D) or of all heads at once (H x D) on both."""
    q, k = attention.q_norm, attention.k_norm
    if q is None and k is None:
        return True
    D = attention.head_dim
    return all(type(norm) in (RMSNorm, AllHeadsRMSNorm) and norm.weight.numel() == (D if type(norm) is RMSNorm
                                                                                     else heads * D)
               for norm, heads in ((q, attention.n_heads), (k, attention.n_kv_heads)))


def _hooked(model: nn.Module) -> bool:
    """Whether a forward hook would run in some module of `model` (its own, or one set for every module)."""
    from torch.nn.modules import module as torch_module

    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def _quantized(layer: nn.Module) -> bool:
    """An int8 / int4 linear layer whose tensors the kernels read as they are."""
    return (type(layer) is QuantizedLinear and layer.qweight.is_cpu and layer.qweight.is_contiguous()
            and layer.scales.is_contiguous() and (layer.mins is None or layer.mins.is_contiguous())
            and (layer.bias is None or (layer.bias.dtype == torch.float32 and layer.bias.is_contiguous())))


def _arguments(model: TransformerDecoder) -> tuple[list[torch.Tensor | None], list[int], list[int]]:
    """decoder_step's flat weight list (per layer: norm1, qkv, q_norm, k_norm, out, post_norm1, norm2, gate_up,
    down, post_norm2, each matrix as q, scales, mins, bias and each norm missing as None; then the final norm
    and the head), and each matrix's group size and rounding of its input (0: none, else KERNEL_CODES')."""
    weights, matrices = [], []
    for block in model.blocks:
        attention, ff = block.attention, block.feed_forward
        weights += [_norm(block.norm1), *_matrix(attention.qkv), _norm(attention.q_norm), _norm(attention.k_norm),
                    *_matrix(attention.out), _norm(block.post_norm1), _norm(block.norm2), *_matrix(ff.gate_up),
                    *_matrix(ff.down), _norm(block.post_norm2)]
        matrices += [attention.qkv, attention.out, ff.gate_up, ff.down]
    weights += [_norm(model.norm), *_matrix(model.lm_head)]
    matrices.append(model.lm_head)
    roundings = [KERNEL_CODES.get(layer.activations, 0) for layer in matrices]
    return weights, [layer.group_size for layer in matrices], roundings


def _matrix(layer: QuantizedLinear) -> list[torch.Tensor | None]:
    return [layer.qweight, layer.scales, layer.mins, None if layer.bias is None else layer.bias.detach()]


def _norm(norm: nn.Module | None) -> torch.Tensor | None:
    return norm.weight.detach() if isinstance(norm, RMSNorm) else None
