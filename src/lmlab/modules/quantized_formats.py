"""How lmlab stores int8 and int4 weights, and the plain-torch maths of packing and unpacking them.

  int8  q (out, in) int8 and one scale per group of `group_size` numbers along `in`: w = s q.
        Per-channel (group_size = in, fp32 scales) is what `quantize_int8` makes from float weights;
        GGUF's Q8_0 is groups of 32 with fp16 scales, Q6_K groups of 16 with fp32 ones.
  int4  q (out, in / 2) uint8, two numbers 0..15 a byte, and a scale s and a min m per group:
        w = s q + m. In every run of 32 numbers, byte i holds number i (low nibble) and i + 16 (high
        nibble), GGUF's Q4_0 / Q4_1 order; a group is a whole number of runs (group_size % 32 == 0).
        Without mins (`mins` None) m = -8 s: w = s (q - 8), GGUF's Q4_0, whose blocks then take 18 bytes
        as in the file instead of 20.

Scales and mins are fp16 where that is exact and fp32 where it is not (`QuantizedWeight.scales.dtype`).
The C++ kernels (kernels/quantized_matmul.cpp) read these same tensors; the functions here are their
reference and their fallback, and dequantize exactly as the kernels do (s * q, then + m, each rounded).
"""

from dataclasses import dataclass

import torch

from lmlab.modules.int4_runs import RUN


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight matrix (out, in) as integers plus per-group scales (and, for int4, mins)."""

    q: torch.Tensor  # int8 (out, in) or uint8 (out, in / 2)
    scales: torch.Tensor  # (out, in / group_size) fp16 or fp32
    mins: torch.Tensor | None  # like scales for int4, or None (m = -8 s); None for int8
    group_size: int

    @property
    def bits(self) -> int:
        return 4 if self.q.dtype == torch.uint8 else 8

    def int4_mins(self) -> torch.Tensor:
        """An int4 weight's mins, made where it stores none: -8 s in fp32 (exact)."""
        return self.mins if self.mins is not None else self.scales.float() * -8

    @property
    def shape(self) -> tuple[int, int]:
        """(out, in) of the matrix it stands for."""
        out, width = self.q.shape
        return out, width * 2 if self.bits == 4 else width


def quantize_int8(w: torch.Tensor, group_size: int | None = None) -> QuantizedWeight:
    """Symmetric int8 of w (out, in): per channel (one fp32 scale per row) unless `group_size` is given.
    s = max|w| / 127 over the group, q = round(w / s) in [-127, 127]."""
    out, width = w.shape
    group_size = group_size or width
    groups = w.detach().float().reshape(out, width // group_size, group_size)  # (out, G, g)
    scales = divided(groups.abs().amax(-1), 127)  # (out, G)
    q = torch.where(scales[..., None] > 0, groups / scales[..., None].clamp_min(torch.finfo(torch.float32).tiny),
                    torch.zeros_like(groups))
    q = q.round().clamp(-127, 127).to(torch.int8).reshape(out, width)
    return QuantizedWeight(q.contiguous(), scales.contiguous(), None, group_size)


def quantize_int4(w: torch.Tensor, group_size: int = 32) -> QuantizedWeight:
    """Asymmetric int4 of w (out, in) in groups of `group_size` along `in`: m = the group's min, s = (max - m)
    / 15, q = round((w - m) / s) in [0, 15]. Scale and min are rounded to fp16 first (fp32 if fp16 cannot
    hold them), then q is computed from the rounded ones, so w ~ s q + m holds for what is stored."""
    out, width = w.shape
    groups = w.detach().float().reshape(out, width // group_size, group_size)  # (out, G, g)
    low, high = groups.amin(-1), groups.amax(-1)  # (out, G)
    scales, mins = divided(high - low, 15), low
    half = scales.half(), mins.half()
    if all(torch.isfinite(t).all() for t in half):
        scales, mins = half
    s, m = scales.float()[..., None], mins.float()[..., None]
    q = torch.where(s > 0, (groups - m) / s.clamp_min(torch.finfo(torch.float32).tiny), torch.zeros_like(groups))
    q = q.round().clamp(0, 15).to(torch.uint8).reshape(out, width)
    return QuantizedWeight(pack_int4(q), scales.contiguous(), mins.contiguous(), group_size)


def divided(numerator: torch.Tensor | float, denominator: torch.Tensor | float) -> torch.Tensor:
    """numerator / denominator (a tensor and a number, either way round) rounded once, as C divides floats, on
    every device. torch takes `t / 127` on CUDA and `127 / t` everywhere as a product with a reciprocal, off in
    the last bit for some values: a model quantized on a GPU would get other scales than on the CPU, and an
    activation rounded to 8 bits could land on the other integer than llama.cpp's."""
    like = numerator if isinstance(numerator, torch.Tensor) else denominator
    numerator, denominator = (x if isinstance(x, torch.Tensor) else torch.full_like(like, x)
                              for x in (numerator, denominator))
    return numerator / denominator


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """Numbers 0..15 (out, in) uint8 -> packed (out, in / 2): in each run of 32, byte i = v[i] | v[i + 16] << 4."""
    out, width = values.shape
    runs = values.reshape(out, width // RUN, 2, RUN // 2)  # (out, runs, low / high half, 16)
    return (runs[:, :, 0] | (runs[:, :, 1] << 4)).reshape(out, width // 2).contiguous()


def unpack_int4(q: torch.Tensor) -> torch.Tensor:
    """Packed (out, in / 2) uint8 -> the numbers 0..15 (out, in) uint8; the inverse of `pack_int4`."""
    out, half = q.shape
    runs = q.reshape(out, half // (RUN // 2), 1, RUN // 2)  # (out, runs, 1, 16)
    return torch.cat([runs & 0x0F, runs >> 4], dim=2).reshape(out, half * 2)


def dequantize(weight: QuantizedWeight) -> torch.Tensor:
    """The fp32 matrix (out, in) that `weight` stands for (w = s q, or s q + m), computed in torch."""
    out, width = weight.shape
    values = unpack_int4(weight.q) if weight.bits == 4 else weight.q
    groups = values.float().reshape(out, -1, weight.group_size)  # (out, G, g)
    w = groups * weight.scales.float()[..., None]
    if weight.bits == 4:
        w = w + weight.int4_mins().float()[..., None]
    return w.reshape(out, width)


def select_rows(weight: QuantizedWeight, rows: torch.Tensor) -> QuantizedWeight:
    """The rows `rows` (n,) of `weight`, still quantized (an embedding's lookup, before dequantizing)."""
    return QuantizedWeight(weight.q[rows], weight.scales[rows],
                           weight.mins[rows] if weight.mins is not None else None, weight.group_size)
