"""Q4_K, llama.cpp's 4-bit k-quant, quantized in numpy: what `lmlab export --to gguf --dtype q4_k` writes.

No maintained quantizer serves. gguf-py (0.19.0, the newest release, the library llama.cpp's converter writes
with) reads Q4_K but quantizes only BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0 and MXFP4 (its `Q4_K`
class has no `quantize_blocks`); llama.cpp's own, `quantize_row_q4_K_ref` in ggml-quants.c, is C inside
llama-cpp-python, a test extra that reaches it only through `llama_model_quantize` on a whole file. This is
that reference quantizer (without an importance matrix) translated to numpy, vectorised over sub-blocks:

- A super-block is 256 numbers of a row: 8 sub-blocks of 32, w = d sc q - dmin m with q 4 bits, sc and m 6 bits.
- Each sub-block's scale and min are `make_qkx2_quants`' fit: the min/max grid, then 21 grids around it whose
  levels (q) are refit by weighted least squares (weights sqrt(mean w^2) + |w|, a min above 0 refit as 0),
  keeping the lowest weighted squared error.
- The 8 scales and 8 mins are rounded to 6 bits of the largest (d, dmin in fp16) and the numbers re-rounded
  to the levels the stored scales give.

Stored as GGUF's block_q4_K (144 bytes): fp16 d, fp16 dmin, 12 bytes of packed 6-bit scales and mins, 128
bytes of nibbles (in each 64 numbers, the first 32 low, the next 32 high). The bytes are not llama.cpp's bit
for bit: its float32 sums round differently (summing in its loops' order did not change that), and a last-bit
difference of a difference of sums picks another of two nearly equal grids. The error is as low: read back by
gguf-py's dequantizer, normal weights are off by 7.2 % of their RMS, by 7.1 % with llama.cpp's quantizer
(tests/models/test_gguf_q4_k.py holds every matrix of a model within 2 % of llama.cpp's error on it).
"""

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

SUPER, SUB = 256, 32  # numbers in a super-block, in a sub-block
LEVELS, SCALE_LEVELS = 15, 63  # the largest q (4 bits), the largest sc and m (6 bits)
GRIDS = np.float32(-1.0) + np.float32(0.1) * np.arange(21, dtype=np.float32)  # make_qkx2_quants' rmin, rdelta, nstep
CHUNK = 4096  # super-blocks quantized at once: bounds the temporaries to a few MiB


def quantize_q4_k(weights: np.ndarray) -> np.ndarray:
    """`weights` (rows, cols), cols a multiple of 256, as Q4_K blocks: uint8 (rows, cols / 256 * 144), the
    byte shape gguf-py's `GGUFWriter.add_tensor(..., raw_dtype=Q4_K)` takes."""
    rows, cols = weights.shape
    assert cols % SUPER == 0, f"Q4_K rows are whole super-blocks of {SUPER}, not {cols}"
    blocks = np.ascontiguousarray(weights, dtype=np.float32).reshape(-1, SUPER)  # (N, 256)
    packed = [_quantize_blocks(blocks[start:start + CHUNK]) for start in range(0, len(blocks), CHUNK)]
    return np.concatenate(packed).reshape(rows, cols // SUPER * GGML_QUANT_SIZES[Q.Q4_K][1])


def _quantize_blocks(blocks: np.ndarray) -> np.ndarray:
    """(N, 256) float32 -> (N, 144) uint8 block_q4_K, as llama.cpp's quantize_row_q4_K_ref."""
    n = len(blocks)
    x = blocks.reshape(n, 8, SUB)  # (N, 8, 32)
    scales, mins, levels = _fit_sub_blocks(x.reshape(-1, SUB))  # (8N,), (8N,), (8N, 32)
    scales, mins, levels = scales.reshape(n, 8), mins.reshape(n, 8), levels.reshape(n, 8, SUB)
    max_scale, max_min = np.maximum(scales.max(1), 0), np.maximum(mins.max(1), 0)  # (N,)
    ls = _six_bits(scales, max_scale)  # (N, 8)
    lm = _six_bits(mins, max_min)
    d = (max_scale / np.float32(SCALE_LEVELS)).astype(np.float16)  # (N,)
    dmin = (max_min / np.float32(SCALE_LEVELS)).astype(np.float16)
    step = d.astype(np.float32)[:, None] * ls  # (N, 8): the stored scale of each sub-block
    offset = dmin.astype(np.float32)[:, None] * lm  # (N, 8): minus its min
    with np.errstate(divide="ignore", invalid="ignore"):
        requantized = np.clip(np.rint((x + offset[..., None]) / step[..., None]), 0, LEVELS)
    levels = np.where(step[..., None] != 0, requantized, levels).astype(np.uint8)  # (N, 8, 32)
    return np.concatenate([d[:, None].view(np.uint8), dmin[:, None].view(np.uint8), _pack_scales(ls, lm),
                           _pack_nibbles(levels.reshape(n, SUPER))], axis=1)


def _fit_sub_blocks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row of `x` (M, 32) as scale * q - min, q in 0..15 (llama.cpp's make_qkx2_quants with rmin -1,
    rdelta 0.1, 20 steps): (scale (M,), min (M,) >= 0, q (M, 32))."""
    weights = np.sqrt(np.mean(x * x, axis=1, keepdims=True)) + np.abs(x)  # (M, 32)
    lo, hi = np.minimum(x.min(1), 0), x.max(1)  # (M,)
    span = np.where(hi > lo, hi - lo, 1)[:, None]  # (M, 1); a constant sub-block keeps q = 0, scale 0
    sum_w, sum_x = weights.sum(1), (weights * x).sum(1)
    best_q = np.clip(np.rint(np.float32(LEVELS) / span * (x - lo[:, None])), 0, LEVELS)
    best_scale, best_min = span[:, 0] / np.float32(LEVELS), lo
    best_error = _error(x, weights, best_q, best_scale, best_min)
    for grid in GRIDS:
        q = np.clip(np.rint((grid + np.float32(LEVELS)) / span * (x - lo[:, None])), 0, LEVELS)  # (M, 32)
        sum_l, sum_l2, sum_xl = (weights * q).sum(1), (weights * q * q).sum(1), (weights * q * x).sum(1)
        det = sum_w * sum_l2 - sum_l * sum_l
        safe = np.where(det > 0, det, 1)
        scale, low = (sum_w * sum_xl - sum_x * sum_l) / safe, (sum_l2 * sum_x - sum_l * sum_xl) / safe
        scale = np.where(low > 0, sum_xl / np.where(sum_l2 > 0, sum_l2, 1), scale)
        low = np.minimum(low, 0)
        error = _error(x, weights, q, scale, low)
        better = (det > 0) & (error < best_error)
        best_q = np.where(better[:, None], q, best_q)
        best_scale, best_min = np.where(better, scale, best_scale), np.where(better, low, best_min)
        best_error = np.where(better, error, best_error)
    constant = hi == lo
    return np.where(constant, 0, best_scale), -best_min, np.where(constant[:, None], 0, best_q)


def _error(x: np.ndarray, weights: np.ndarray, q: np.ndarray, scale: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The weighted squared error of x ~ scale * q + low, per row (M,)."""
    return (weights * np.square(scale[:, None] * q + low[:, None] - x)).sum(1)


def _six_bits(values: np.ndarray, largest: np.ndarray) -> np.ndarray:
    """(N, 8) sub-block scales (or mins) in 6 bits of their super-block's `largest` (N,), uint8 0..63."""
    inverse = np.where(largest > 0, np.float32(SCALE_LEVELS) / np.where(largest > 0, largest, 1), 0)
    return np.minimum(np.rint(inverse[:, None] * values), SCALE_LEVELS).astype(np.uint8)


def _pack_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """8 6-bit scales and 8 6-bit mins (N, 8) in Q4_K's 12 bytes (N, 12): bytes 0-3 scales 0-3 and the top
    2 bits of scales 4-7, bytes 4-7 mins 0-3 and the top bits of mins 4-7, bytes 8-11 the low 4 bits of
    scale and min 4-7."""
    return np.concatenate([ls[:, :4] | (ls[:, 4:] >> 4) << 6, lm[:, :4] | (lm[:, 4:] >> 4) << 6,
                           (ls[:, 4:] & 0xF) | (lm[:, 4:] & 0xF) << 4], axis=1)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(N, 256) levels 0..15 as (N, 128) bytes: in each 64 numbers, the first 32 in the low nibbles of 32
    bytes, the next 32 in their high nibbles."""
    halves = q.reshape(len(q), 4, 2, SUB)  # (N, 4, 2, 32)
    return (halves[:, :, 0] | halves[:, :, 1] << 4).reshape(len(q), SUPER // 2)
