"""The inputs of a quantized matrix product rounded to 8 bits in blocks, as llama.cpp rounds them.

llama.cpp multiplies a quantized weight row by an activation row that it first quantizes into the
weight type's partner format (ggml's `vec_dot_type`), so that the dot product runs on integers:

  kind   next to                              block  scale                                  q
  q8_0   Q4_0, Q5_0, Q8_0, IQ4_NL              32    d = amax / 127, stored fp16            round(x * 127 / amax)
  q8_1   Q4_1, Q5_1                            32    as q8_0, and the block's sum d sum(q)
                                                     stored fp16 (it multiplies the min)
  q8_K   Q2_K .. Q6_K, IQ4_XS                 256    d = 1 / (-127 / max), fp32; max is the  min(127, round(x * -127 / max))
                                                     signed value of the largest magnitude
  f16    F16                                   -     -                                      x in fp16
  bf16   BF16                                  -     -                                      x in bf16

(rounding to nearest, ties to even: `_mm256_round_ps` and `nearest_int`, as `torch.round`). lmlab's
kernels keep activations in fp32, which is more accurate; rounding them as llama.cpp does makes lmlab
running a GGUF file compute what llama.cpp computes on it, up to the order of fp32 additions
(`lmlab.load(..., activations="int8")`, `--activations int8`). That order can still put a value on the
other side of a rounding boundary, which on a real model moves the logits by a rounding step (docs/export.md
measures it on SmolLM2); on small models the two pick the same greedy tokens. Here the values are rounded
and kept in fp32 (d q is exact in fp32) and multiplied as any activations: the reference, and the path off
the CPU. The C++ kernels (kernels/activation_rounding.cpp) round the same way and multiply the integers, as
llama.cpp does, which is faster than fp32 activations: `quantized_ops.rounded_linear` picks.
"""

import torch

from lmlab.modules.quantized_formats import divided

BLOCK = {"q8_0": 32, "q8_1": 32, "q8_K": 256}
KERNEL_CODES = {"q8_0": 1, "q8_1": 2, "q8_K": 3}  # the C++ kernels' Rounding codes (kernels/quantized_matmul.h)


def round_activations(x: torch.Tensor, kind: str) -> torch.Tensor:
    """x (..., K) fp32 -> the values llama.cpp's `kind` holds for it, (..., K) fp32. K is a multiple of the
    kind's block (a GGUF matrix's width always is)."""
    if kind in ("f16", "bf16"):
        return x.to(torch.float16 if kind == "f16" else torch.bfloat16).float()
    blocks = x.unflatten(-1, (-1, BLOCK[kind]))  # (..., K / block, block)
    if kind == "q8_K":
        return _q8_k(blocks).flatten(-2)
    amax = blocks.abs().amax(-1, keepdim=True)  # (..., K / block, 1)
    d = divided(amax, 127).half().float()
    inverse = torch.where(amax != 0, divided(127, amax), torch.zeros_like(amax))
    return ((blocks * inverse).round() * d).flatten(-2)


def _q8_k(blocks: torch.Tensor) -> torch.Tensor:
    """q8_K's values of (..., n, 256) blocks: the scale's sign is that of the block's largest magnitude."""
    signed_max = blocks.gather(-1, blocks.abs().argmax(-1, keepdim=True))  # (..., n, 1)
    inverse = torch.where(signed_max != 0, divided(-127, signed_max), torch.zeros_like(signed_max))
    d = torch.where(inverse != 0, 1 / inverse, torch.zeros_like(inverse))
    return (blocks * inverse).round().clamp_max(127) * d


def q8_1_min_correction(x: torch.Tensor, rounded: torch.Tensor, mins: torch.Tensor) -> torch.Tensor:
    """What to add to x W^T computed on `rounded` (q8_1's values of x (..., K)) for a weight w = s q + m with
    mins (out, K / 32) to get llama.cpp's product: it multiplies each block's min by the block sum q8_1
    stores, d sum(q) in fp16 (d unrounded), not by the sum of the values. -> (..., out)"""
    blocks = x.unflatten(-1, (-1, 32))  # (..., K / 32, 32)
    amax = blocks.abs().amax(-1, keepdim=True)  # (..., K / 32, 1)
    inverse = torch.where(amax != 0, divided(127, amax), torch.zeros_like(amax))
    stored = (divided(amax, 127)[..., 0] * (blocks * inverse).round().sum(-1)).half().float()  # (..., K / 32)
    return (stored - rounded.unflatten(-1, (-1, 32)).sum(-1)) @ mins.float().T

