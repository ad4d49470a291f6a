"""GGUF files kept quantized: their blocks repacked into lmlab's int4 / int8 layers, never made fp32.

Each GGUF block type maps onto one of lmlab's formats (`modules/quantized_formats.py`) exactly, so
the quantized model computes with the very numbers the file holds:

  Q4_0   d, 32 x 4 bits         w = d (q - 8)        -> int4, scale d, min -8 d (fp16; fp32 if -8 d overflows)
  Q4_1   d, m, 32 x 4 bits      w = d q + m          -> int4, scale d, min m (fp16): the bytes copy straight in
  Q4_K   256 = 8 x 32, 6-bit sub-scales and mins     -> int4 in groups of 32, scale d sc, min -dmin m (fp32,
                                                        exact: 11 x 6 bits), the nibbles reordered
  Q8_0   d, 32 x int8           w = d q              -> int8 in groups of 32, fp16 scales
  Q6_K   256 = 16 x 16, int8 sub-scales, 6-bit q     -> int8 in groups of 16, scale d sc (fp32, exact)

with mode "int4" every type above keeps its own numbers; with mode "int8" the Q4 types are dequantized
and re-quantized to int8 per channel (Q8_0 and Q6_K stay exact). Any other matrix (F32, F16, BF16, Q5_K)
is dequantized and quantized to int8 per channel in both modes; the norms stay fp32.

Where the family's converter stacks GGUF tensors (Llama's q/k/v, gate/up) or reorders their rows,
the same is done to the packed rows: the converter is run on row labels (`_row_sources`), which says
for every row of ours which row of which GGUF tensor it is. Stacked parts stored in different formats
are dequantized and stacked as one int8 per-channel matrix.
"""

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf import ReaderTensor

from lmlab.errors import LmlabError
from lmlab.modules.quantized_formats import QuantizedWeight, dequantize, pack_int4, quantize_int8, select_rows

BLOCK_BYTES = {Q.Q4_0: 18, Q.Q4_1: 20, Q.Q4_K: 144, Q.Q8_0: 34, Q.Q6_K: 210}
INT4_TYPES = (Q.Q4_0, Q.Q4_1, Q.Q4_K)


def repack(tensor: ReaderTensor, mode: str, dequantized) -> QuantizedWeight | torch.Tensor:
    """One GGUF tensor in lmlab's form for `mode`: a `QuantizedWeight` for a matrix, fp32 for a vector.
    `dequantized(tensor)` gives its fp32 values (out, in), for the types not kept as they are."""
    kind = tensor.tensor_type
    if len(tensor.shape) == 1:
        return dequantized(tensor)
    if kind == Q.Q8_0:
        return _q8_0(_blocks(tensor))
    if kind == Q.Q6_K:
        return _q6_k(_blocks(tensor), dequantized(tensor))
    if kind in INT4_TYPES and mode == "int4":
        return {Q.Q4_0: _q4_0, Q.Q4_1: _q4_1, Q.Q4_K: _q4_k}[kind](_blocks(tensor))
    return quantize_int8(dequantized(tensor))


def _blocks(tensor: ReaderTensor) -> tuple[np.ndarray, int]:
    """The tensor's bytes as (rows, blocks per row, block bytes), and its row count."""
    rows = int(np.prod([int(n) for n in tensor.shape[1:]]))
    data = np.asarray(tensor.data, dtype=np.uint8).reshape(rows, -1, BLOCK_BYTES[tensor.tensor_type])
    return data, rows


def _half(data: np.ndarray) -> torch.Tensor:
    """Little-endian fp16 numbers from (..., 2) bytes -> (...) float16."""
    return torch.from_numpy(np.ascontiguousarray(data).view(np.float16)[..., 0].copy())


def _q4_0(blocks) -> QuantizedWeight:
    data, rows = blocks
    d = _half(data[..., 0:2])  # (rows, blocks)
    low = -8 * d.float()
    mins = low.half() if torch.isfinite(low.half()).all() else low
    scales = d if mins.dtype == torch.float16 else d.float()
    return QuantizedWeight(_bytes(data[..., 2:18], rows), scales, mins, 32)


def _q4_1(blocks) -> QuantizedWeight:
    data, rows = blocks
    return QuantizedWeight(_bytes(data[..., 4:20], rows), _half(data[..., 0:2]), _half(data[..., 2:4]), 32)


def _q4_k(blocks) -> QuantizedWeight:
    """Super-blocks of 256: d, dmin (fp16), 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32,
    then 128 bytes where 32-byte chunk c holds sub-block 2c in its low nibbles, 2c + 1 in its high ones."""
    data, rows = blocks
    n = data.shape[1]
    d, dmin = _half(data[..., 0:2]).float(), _half(data[..., 2:4]).float()  # (rows, n)
    packed = data[..., 4:16].astype(np.int32)  # (rows, n, 12)
    first, second, high = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    sc = np.concatenate([first & 63, (high & 0x0F) | ((first >> 6) << 4)], axis=-1)  # (rows, n, 8)
    mn = np.concatenate([second & 63, (high >> 4) | ((second >> 6) << 4)], axis=-1)
    scales = (d[..., None] * torch.from_numpy(sc).float()).reshape(rows, n * 8)
    mins = -(dmin[..., None] * torch.from_numpy(mn).float()).reshape(rows, n * 8)
    qs = torch.from_numpy(np.ascontiguousarray(data[..., 16:144])).reshape(rows, n, 4, 32)  # (rows, n, chunk, 32)
    values = torch.stack([qs & 0x0F, qs >> 4], dim=3).reshape(rows, n * 256)  # sub-blocks in order
    return QuantizedWeight(pack_int4(values), scales.contiguous(), mins.contiguous(), 32)


def _q8_0(blocks) -> QuantizedWeight:
    data, rows = blocks
    q = torch.from_numpy(np.ascontiguousarray(data[..., 2:34]).view(np.int8).copy()).reshape(rows, -1)
    return QuantizedWeight(q, _half(data[..., 0:2]), None, 32)


def _q6_k(blocks, values: torch.Tensor) -> QuantizedWeight:
    """Super-blocks of 256: 6-bit q in 16 groups of 16, each with an int8 scale, times fp16 d: w = d sc
    (q - 32), exactly. The scales come from the bytes; q - 32 from the values (w / (d sc), exact)."""
    data, rows = blocks
    n = data.shape[1]
    sc = torch.from_numpy(np.ascontiguousarray(data[..., 192:208]).view(np.int8).astype(np.float32))  # (rows, n, 16)
    scales = (_half(data[..., 208:210]).float()[..., None] * sc).reshape(rows, n * 16)
    groups = values.reshape(rows, n * 16, 16)
    q = torch.where(scales[..., None] != 0, groups / scales[..., None].masked_fill(scales[..., None] == 0, 1), 0)
    return QuantizedWeight(q.round().to(torch.int8).reshape(rows, -1), scales.contiguous(), None, 16)


def _bytes(data: np.ndarray, rows: int) -> torch.Tensor:
    """(rows, blocks, 16) nibble bytes, already in lmlab's int4 order -> (rows, in / 2) uint8."""
    return torch.from_numpy(np.ascontiguousarray(data)).reshape(rows, -1)


def stacked(parts: list[QuantizedWeight | torch.Tensor]) -> QuantizedWeight | torch.Tensor:
    """The parts one under another (rows concatenated): kept in their format when they share it (scales
    widened to fp32 if their dtypes differ), else dequantized and quantized to int8 per channel."""
    if all(isinstance(p, torch.Tensor) for p in parts):
        return torch.cat(parts)
    same = all(isinstance(p, QuantizedWeight) and p.bits == parts[0].bits and p.group_size == parts[0].group_size
               for p in parts)
    if not same:
        return quantize_int8(torch.cat([dequantize(p) if isinstance(p, QuantizedWeight) else p for p in parts]))
    dtype = torch.float16 if all(p.scales.dtype == torch.float16 for p in parts) else torch.float32
    mins = torch.cat([p.mins.to(dtype) for p in parts]) if parts[0].mins is not None else None
    return QuantizedWeight(torch.cat([p.q for p in parts]), torch.cat([p.scales.to(dtype) for p in parts]), mins,
                           parts[0].group_size)


def take_rows(weight: QuantizedWeight | torch.Tensor, rows: torch.Tensor) -> QuantizedWeight | torch.Tensor:
    """Rows `rows` of a matrix, in that order (a vector: all of it, in order, is all a converter may ask)."""
    return weight[rows] if isinstance(weight, torch.Tensor) else select_rows(weight, rows)


def row_sources(from_gguf, shapes: dict[str, tuple[int, ...]], cfg) -> dict[str, torch.Tensor]:
    """For each tensor of ours, (rows, 2): [index of the GGUF tensor in `shapes`' order, its row], found by
    running the family's `from_gguf` on labels instead of weights."""
    labels = {name: torch.stack([torch.full((shape[0],), i), torch.arange(shape[0])], dim=1)
              for i, (name, shape) in enumerate(shapes.items())}
    try:
        return from_gguf(labels, cfg)
    except RuntimeError as e:
        raise LmlabError(f"the GGUF tensors do not fit its metadata ({str(e).splitlines()[0]}); download the "
                         "file again") from None


def assemble(sources: dict[str, torch.Tensor], packed: list[QuantizedWeight | torch.Tensor],
             skip: set[str]) -> dict[str, torch.Tensor]:
    """Our state dict from the packed GGUF tensors (`packed`, in the GGUF order) and `row_sources`: a quantized
    layer `X.weight` becomes X.qweight, X.scales (and X.mins); a vector stays as it is. Names in `skip`
    (a tied LM head) are left out."""
    state = {}
    for name, labels in sources.items():
        if name in skip:
            continue
        order = list(dict.fromkeys(labels[:, 0].tolist()))  # the GGUF tensors it stacks, in order
        offsets = dict(zip(order, np.cumsum([0] + [_rows(packed[i]) for i in order[:-1]]).tolist()))
        rows = torch.tensor([offsets[i] for i in labels[:, 0].tolist()]) + labels[:, 1]
        weight = take_rows(stacked([packed[i] for i in order]), rows)
        if isinstance(weight, torch.Tensor):
            state[name] = weight
            continue
        layer = name.removesuffix(".weight")
        state[f"{layer}.qweight"], state[f"{layer}.scales"] = weight.q, weight.scales
        if weight.mins is not None:
            state[f"{layer}.mins"] = weight.mins
    return state


def _rows(weight: QuantizedWeight | torch.Tensor) -> int:
    return weight.q.shape[0] if isinstance(weight, QuantizedWeight) else weight.shape[0]
