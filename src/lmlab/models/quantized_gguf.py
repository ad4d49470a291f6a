"""GGUF files kept quantized: their blocks repacked into lmlab's int4 / int8 layers, never made fp32.

`KEPT` says, per GGUF block type and mode, which of lmlab's formats (`modules/quantized_formats.py`)
holds the file's numbers exactly, so the quantized model computes with the very numbers the file holds
(lmlab's w = s q (+ m) in fp32 is gguf-py's dequantized value bit for bit):

  type    block                                      int4 mode                  int8 mode
  Q4_0    d, 32 x 4 bits: w = d (q - 8)              int4 without mins (1)      int8, groups of 32, fp16 d
  Q4_1    d, m, 32 x 4 bits: w = d q + m             int4, groups of 32         re-quantized (3)
  Q4_K    256 = 8 x 32, 6-bit sub-scales and mins    int4, groups of 32 (2)     re-quantized (3)
  Q5_0    d, 32 x 5 bits: w = d (q - 16)             int8, groups of 32, fp16 d (both modes)
  Q8_0    d, 32 x int8: w = d q                      int8, groups of 32, fp16 d (both modes)
  IQ4_NL  d, 32 x 4-bit index into an int8 table     int8, groups of 32, fp16 d (both modes)
  IQ4_XS  256 = 8 x 32, 6-bit sub-scales, IQ4_NL q   int8, groups of 32, fp32 d (ls - 32) (both modes)
  Q6_K    256 = 16 x 16, int8 sub-scales, 6-bit q    int8, groups of 16, fp32 d sc (both modes)
  Q3_K    256 = 16 x 16, 6-bit sub-scales, 3-bit q   int8, groups of 16, fp32 d (sc - 32) (both modes)
  Q5_1, Q5_K, Q2_K                                   re-quantized (3) (both modes)
  F32, F16, BF16                                     int8 per channel (both modes), as any float model

(1) groups of 32, scale d (fp16), no mins: lmlab's int4 takes m = -8 d then, 18 bytes a block as in the file.
(2) scale d sc, min -dmin m (fp32, exact: 11 x 6 bits), the nibbles reordered. (3) dequantized (gguf-py) and quantized to int8 in groups of 32, the blocks' own
width, so that a block's rounding stays within it (per channel, one large block sets the step of the
whole row: SmolLM2 Q4_K_M's 16 Q4_K matrices as int8 per channel moved its logits by 1.3%).

Why the rest is not exact: Q5_1, Q5_K and Q2_K add a min (w = s q + m), which symmetric int8 cannot
hold, and have more than 4 bits (Q5_*) or sub-blocks of 16 (Q2_K), which int4 (groups of a multiple of
32) cannot; a 4-bit type with a min (Q4_1, Q4_K) is not int8 either. IQ4_NL / IQ4_XS are not affine (a 16-entry
codebook), so not int4, but the codebook's entries are int8 numbers, so d * entry is int8 exactly.
The int8 forms read the scales from the blocks and q from gguf-py's values (w / s, exact); Q8_0 and the
int4 forms read q from the blocks. The norms (vectors) stay fp32.

Where the family's converter stacks GGUF tensors (Llama's q/k/v, gate/up) or reorders their rows,
the same is done to the packed rows: the converter is run on row labels (`row_sources`), which says
for every row of ours which row of which GGUF tensor it is. Stacked parts stored in different formats
are stacked in their int8 forms (Q4_0 exactly: w = d (q - 8) is int8 in groups of 32; Q4_1 / Q4_K
re-quantized as (3)), in the smallest group among them (a scale repeated per group is the same numbers:
Q8_0 beside Q6_K is int8 in groups of 16, exact). `kernel_summary` says it all in a line.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGUFReader, ReaderTensor
from gguf import GGMLQuantizationType as Q

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_write_text
from lmlab.io.cache import cache_dir
from lmlab.io.gguf_layout import check_layout, content_key
from lmlab.models import registry
from lmlab.modules.quantized_formats import (
    QuantizedWeight,
    dequantize,
    pack_int4,
    quantize_int8,
    select_rows,
    unpack_int4,
)

FLOAT_TYPES = (Q.F32, Q.F16, Q.BF16)  # quantized to int8 per channel, as lmlab quantizes any float model


@dataclass(frozen=True)
class Kept:
    """How a GGUF block type is held exactly in one of lmlab's formats: `repack(blocks, values)` makes the
    `QuantizedWeight` from the (rows, blocks per row, block bytes) bytes and, where it needs them, the fp32
    values (`values()`, (rows, in)), int`bits` in groups of `group_size`."""

    repack: Callable[[np.ndarray, Callable[[], torch.Tensor]], QuantizedWeight]
    bits: int
    group_size: int


def repack(tensor: ReaderTensor, mode: str, dequantized) -> QuantizedWeight | torch.Tensor:
    """One GGUF tensor in lmlab's form for `mode`: a `QuantizedWeight` for a matrix, fp32 for a vector.
    `dequantized(tensor)` gives its fp32 values (out, in), for the types not kept as they are."""
    if len(tensor.shape) == 1:
        return dequantized(tensor)
    kept = KEPT[tensor.tensor_type].get(mode) if tensor.tensor_type in KEPT else None
    if kept is None:
        return quantize_int8(dequantized(tensor), None if tensor.tensor_type in FLOAT_TYPES else 32)
    rows = int(np.prod([int(n) for n in tensor.shape[1:]]))
    blocks = np.asarray(tensor.data, dtype=np.uint8).reshape(rows, -1, GGML_QUANT_SIZES[tensor.tensor_type][1])
    return kept.repack(blocks, lambda: dequantized(tensor).reshape(rows, -1))


def form(qtype: Q, mode: str) -> tuple[int, int | None, bool]:
    """(bits, group size or None for per channel, exact) of a matrix stored as `qtype` loaded as `mode`."""
    kept = KEPT[qtype].get(mode) if qtype in KEPT else None
    return (kept.bits, kept.group_size, True) if kept else (8, None if qtype in FLOAT_TYPES else 32, False)


def kernel(qtype: Q, mode: str) -> str:
    """Which kernel a matrix stored as `qtype` runs on when loaded as `mode`, and whether exactly."""
    return _label(*form(qtype, mode))


def _label(bits: int, group_size: int | None, exact: bool) -> str:
    groups = f"groups of {group_size}" if group_size else "per channel"
    return f"int{bits} kernel, {groups} ({'exact' if exact else 're-quantized'})"


def kernel_summary(types: dict[str, Q], mode: str, stacks=()) -> str:
    """One line for the GGUF matrices `types` (name -> type) loaded as `mode`: per type, how many matrices and
    the kernel it runs on, exactly or not, e.g. "Q4_K (12): int4 kernel, ...". `stacks`: the names of the
    matrices each of our layers stacks (q/k/v, gate/up); one whose parts run on different kernels takes
    their int8 forms in the smallest group (`stacked`), which the line adds."""
    counts: dict[Q, int] = {}
    for t in types.values():
        counts[t] = counts.get(t, 0) + 1
    line = "; ".join(f"{t.name} ({n}): {kernel(t, mode)}" for t, n in sorted(counts.items(), key=lambda c: c[0].name))
    mixed: dict[str, int] = {}  # the kernel a layer stacking parts of different kernels runs on -> layers
    for stack in stacks:
        if len({form(types[name], mode)[:2] for name in stack}) > 1:
            as_int8 = [form(types[name], "int8") for name in stack]
            runs_on = _label(8, min(g for _, g, _ in as_int8 if g), all(exact for *_, exact in as_int8))
            mixed[runs_on] = mixed.get(runs_on, 0) + 1
    return "; ".join([line] + [f"{n} layers stacking parts of different kernels: {k}" for k, n in mixed.items()])


def file_kernel_summary(path: Path, mode: str, cfg) -> str:
    """`kernel_summary` of the GGUF file at `path` loaded as `mode` into a model of config `cfg`."""
    types, sources = _file_layers(path, cfg)
    names = list(types)
    stacks = [[names[i] for i in dict.fromkeys(labels[:, 0].tolist())] for labels in sources.values()]
    return kernel_summary({name: t for name, (t, shape) in types.items() if len(shape) > 1}, mode,
                          [stack for stack in stacks if len(stack) > 1])


VEC_DOT = {  # GGUF weight type -> how llama.cpp rounds the activations it multiplies (`activation_rounding.py`)
    **dict.fromkeys((Q.Q4_0, Q.Q5_0, Q.Q8_0, Q.IQ4_NL), "q8_0"), **dict.fromkeys((Q.Q4_1, Q.Q5_1), "q8_1"),
    **dict.fromkeys((Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_XS), "q8_K"), Q.F16: "f16", Q.BF16: "bf16",
    Q.F32: None}


def activation_kinds(path: Path, cfg) -> dict[str, str | None]:
    """For each linear layer of ours (its weight's name without ".weight"), how llama.cpp rounds the activations
    it multiplies with the GGUF matrices that layer stacks (`VEC_DOT`). Parts that llama.cpp would round
    differently in one layer of ours are refused: no single rounding is llama.cpp's there."""
    types, sources = _file_layers(path, cfg)
    names, kinds = list(types), {}
    for name, labels in sources.items():
        parts = [names[i] for i in dict.fromkeys(labels[:, 0].tolist())]
        if len(types[parts[0]][1]) < 2:
            continue
        unknown = [types[p][0].name for p in parts if types[p][0] not in VEC_DOT]
        found = {VEC_DOT.get(types[p][0]) for p in parts}
        if unknown or len(found) > 1:
            raise LmlabError(f"'{path.name}' has matrices ({', '.join(parts)}) whose inputs lmlab cannot round as "
                             "llama.cpp does (types " + ", ".join(sorted({types[p][0].name for p in parts})) +
                             "); load it without --activations int8")
        kinds[name.removesuffix(".weight")] = found.pop()
    return kinds


def _file_layers(path: Path, cfg) -> tuple[dict[str, tuple[Q, tuple[int, ...]]], dict[str, torch.Tensor]]:
    """The GGUF file's tensors (name -> type, shape (out, in)), and for each tensor of ours its `row_sources`
    in a model of config `cfg`."""
    architecture, tensors = file_tensors(path)
    sources = row_sources(registry.lookup_gguf(architecture).gguf.from_gguf,
                          {name: shape for name, (_, shape) in tensors.items()}, cfg)
    return tensors, sources


def file_tensors(path: Path, key: str | None = None, remember: bool = True) -> tuple[str | None, dict[str, tuple[
        Q, tuple[int, ...]]]]:
    """(architecture, name -> (type, shape (out, in))) of the GGUF file at `path`, remembered in the cache by
    the file's content key (`key` when the caller has it): listing them means parsing the file's header
    (seconds for a real vocabulary), which a cached load never does. `remember=False` writes nothing (a file
    not yet known to load: `remember_tensors` once it did, so that a refused file leaves no trace)."""
    try:
        saved = json.loads(_tensors_memo(path, key).read_text())
        return saved["architecture"], {name: (Q[t], tuple(shape)) for name, (t, shape) in saved["tensors"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    reader, metadata = open_gguf(path, everything=False)
    listing = metadata.get("general.architecture"), {
        t.name: (t.tensor_type, tuple(int(n) for n in reversed(t.shape))) for t in reader.tensors}
    if remember:
        remember_tensors(path, listing, key)
    return listing


def remember_tensors(path: Path, listing: tuple[str | None, dict], key: str | None = None) -> None:
    """Keep `file_tensors`' `listing` of the GGUF file at `path` in the cache, unless it is there already."""
    memo = _tensors_memo(path, key)
    if not memo.is_file():
        architecture, tensors = listing
        atomic_write_text(memo, json.dumps({"architecture": architecture, "tensors": {
            name: [t.name, shape] for name, (t, shape) in tensors.items()}}))


def _tensors_memo(path: Path, key: str | None) -> Path:
    return cache_dir("gguf") / f"{path.stem}-{key or content_key(path, key_memo())}-tensors.json"


def key_memo() -> Path:
    """Where the content keys of GGUF files already loaded are remembered (`content_key`)."""
    return cache_dir("gguf") / "content-keys.json"


def open_gguf(path: Path, everything: bool = True) -> tuple[GGUFReader, dict]:
    """(reader, metadata: key -> value, the "GGUF.*" header fields left out; with `everything=False` only the
    architecture, which skips parsing the vocabulary) of the GGUF file at `path`, its tensors' byte ranges
    checked (`check_layout`); a missing, damaged or foreign file is one line."""
    try:
        reader = GGUFReader(path)
        fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")
                  and (everything or k == "general.architecture")}
        metadata = {k: f.contents() for k, f in fields.items()}
    except FileNotFoundError:
        raise LmlabError(f"GGUF file '{path}' does not exist; check the path") from None
    except (ValueError, OSError, IndexError, KeyError, TypeError, OverflowError, MemoryError,
            UnicodeDecodeError) as e:  # the reader's signs of a bad file
        raise LmlabError(f"'{path}' is not a readable GGUF file ({type(e).__name__}: {e}); it is truncated or "
                         "not GGUF, download it again") from None
    check_layout(reader, Path(path))
    return reader, metadata


def stored_mode(types: dict[str, tuple[Q, tuple[int, ...]]]) -> str | None:
    """The mode that runs a GGUF file of tensors `types` (`file_tensors`) as it is stored, as llama.cpp runs
    it: "int4" when a matrix is of a 4-bit type that int4 keeps in 4 bits (Q4_0, Q4_1, Q4_K: a Q4_K_M file's
    Q6_K matrices are int8 in either mode), else "int8" when any matrix is quantized (Q8_0, Q5_*, Q6_K, Q3_K,
    Q2_K, IQ4_*), else None: an F32 / F16 / BF16 file is a float model."""
    matrices = {t for t, shape in types.values() if len(shape) > 1}
    if any(form(t, "int4")[0] == 4 for t in matrices):
        return "int4"
    return "int8" if matrices - set(FLOAT_TYPES) else None


def _half(data: np.ndarray) -> torch.Tensor:
    """Little-endian fp16 numbers from (..., 2) bytes -> (...) float16."""
    return torch.from_numpy(np.ascontiguousarray(data).view(np.float16)[..., 0].copy())


def _q4_0(data: np.ndarray, values) -> QuantizedWeight:
    return QuantizedWeight(_bytes(data[..., 2:18]), _half(data[..., 0:2]), None, 32)


def _q4_1(data: np.ndarray, values) -> QuantizedWeight:
    return QuantizedWeight(_bytes(data[..., 4:20]), _half(data[..., 0:2]), _half(data[..., 2:4]), 32)


def _q4_k(data: np.ndarray, values) -> QuantizedWeight:
    """Super-blocks of 256: d, dmin (fp16), 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32,
    then 128 bytes where 32-byte chunk c holds sub-block 2c in its low nibbles, 2c + 1 in its high ones."""
    rows, n = data.shape[:2]
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


def _q8_0(data: np.ndarray, values) -> QuantizedWeight:
    rows = data.shape[0]
    q = torch.from_numpy(np.ascontiguousarray(data[..., 2:34]).view(np.int8).copy()).reshape(rows, -1)
    return QuantizedWeight(q, _half(data[..., 0:2]), None, 32)


def _symmetric(scales_of: Callable[[np.ndarray], torch.Tensor], group_size: int):
    """The repacking of a type whose blocks are w = s q with q a small integer and s per `group_size`
    numbers: s from the bytes (`scales_of`: (rows, blocks, bytes) -> (rows, groups)), q = w / s from
    gguf-py's values, exact (a zero scale holds zeros)."""
    def repack_symmetric(data: np.ndarray, values) -> QuantizedWeight:
        scales = scales_of(data)  # (rows, groups)
        s = scales.float()[..., None]
        groups = values().reshape(scales.shape[0], -1, group_size)  # (rows, groups, group_size)
        q = torch.where(s != 0, groups / s.masked_fill(s == 0, 1), 0).round()
        return QuantizedWeight(q.to(torch.int8).reshape(scales.shape[0], -1), scales.contiguous(), None, group_size)
    return repack_symmetric


def _first_half(data: np.ndarray) -> torch.Tensor:
    """Q4_0, Q5_0, IQ4_NL: the block's fp16 d in its first two bytes -> (rows, blocks)."""
    return _half(data[..., 0:2])


def _q6_k_scales(data: np.ndarray) -> torch.Tensor:
    """Q6_K (210 bytes: 128 low bits, 64 high bits, 16 int8 sub-scales, fp16 d) -> d sc (rows, blocks * 16)."""
    sc = torch.from_numpy(np.ascontiguousarray(data[..., 192:208]).view(np.int8).astype(np.float32))  # (rows, n, 16)
    return (_half(data[..., 208:210]).float()[..., None] * sc).reshape(data.shape[0], -1)


def _q3_k_scales(data: np.ndarray) -> torch.Tensor:
    """Q3_K (110 bytes: 32 high-bit mask, 64 low bits, 12 bytes of 6-bit sub-scales, fp16 d) -> d (sc - 32)
    (rows, blocks * 16). Sub-scale i's low 4 bits: byte i % 8, nibble i // 8; its high 2: byte 8 + i % 4,
    bits 2 (i // 4)."""
    packed = data[..., 96:108]  # (rows, n, 12)
    low = np.concatenate([packed[..., 0:8] & 0x0F, packed[..., 0:8] >> 4], axis=-1)  # (rows, n, 16)
    high = np.concatenate([(packed[..., 8:12] >> shift) & 3 for shift in (0, 2, 4, 6)], axis=-1)
    sc = torch.from_numpy((low | (high << 4)).astype(np.float32) - 32)
    return (_half(data[..., 108:110]).float()[..., None] * sc).reshape(data.shape[0], -1)


def _iq4_xs_scales(data: np.ndarray) -> torch.Tensor:
    """IQ4_XS (136 bytes: fp16 d, 16 high bits and 4 bytes of low nibbles of 8 6-bit sub-scales, 128 bytes of
    indices) -> d (ls - 32) (rows, blocks * 8). Sub-scale i: nibble i % 2 of byte 4 + i // 2, bits 2i of the
    uint16 at byte 2."""
    low = np.stack([data[..., 4:8] & 0x0F, data[..., 4:8] >> 4], axis=-1).reshape(*data.shape[:2], 8)
    bits = np.ascontiguousarray(data[..., 2:4]).view(np.uint16)  # (rows, n, 1)
    high = (bits >> (2 * np.arange(8, dtype=np.uint16))) & 3  # (rows, n, 8)
    ls = torch.from_numpy((low | (high << 4)).astype(np.float32) - 32)
    return (_half(data[..., 0:2]).float()[..., None] * ls).reshape(data.shape[0], -1)


def _bytes(data: np.ndarray) -> torch.Tensor:
    """(rows, blocks, 16) nibble bytes, already in lmlab's int4 order -> (rows, in / 2) uint8."""
    return torch.from_numpy(np.ascontiguousarray(data)).reshape(data.shape[0], -1)


_Q8_0 = Kept(_q8_0, 8, 32)
_D32 = Kept(_symmetric(_first_half, 32), 8, 32)
_IQ4_XS = Kept(_symmetric(_iq4_xs_scales, 32), 8, 32)
_Q6_K = Kept(_symmetric(_q6_k_scales, 16), 8, 16)
_Q3_K = Kept(_symmetric(_q3_k_scales, 16), 8, 16)
KEPT: dict[Q, dict[str, Kept]] = {  # GGUF type -> mode -> how it is held exactly; absent: re-quantized (`form`)
    Q.Q4_0: {"int4": Kept(_q4_0, 4, 32), "int8": _D32},
    Q.Q4_1: {"int4": Kept(_q4_1, 4, 32)},
    Q.Q4_K: {"int4": Kept(_q4_k, 4, 32)},
    Q.Q5_0: {"int4": _D32, "int8": _D32},
    Q.Q8_0: {"int4": _Q8_0, "int8": _Q8_0},
    Q.IQ4_NL: {"int4": _D32, "int8": _D32},
    Q.IQ4_XS: {"int4": _IQ4_XS, "int8": _IQ4_XS},
    Q.Q6_K: {"int4": _Q6_K, "int8": _Q6_K},
    Q.Q3_K: {"int4": _Q3_K, "int8": _Q3_K},
}


def stacked(parts: list[QuantizedWeight | torch.Tensor]) -> QuantizedWeight | torch.Tensor:
    """The parts one under another (rows concatenated), in their format when they share it (scales widened
    to fp32 if their dtypes differ); else each in its int8 form (`_as_int8`) with the smallest group of
    them (`_regrouped`: exact; a per-channel part's group is the width, which a block type beside it makes
    a multiple of 32)."""
    if all(isinstance(p, torch.Tensor) for p in parts):
        return torch.cat(parts)
    if not _same_format(parts):
        parts = [_as_int8(p) for p in parts]
        group_size = min(p.group_size for p in parts)
        parts = [_regrouped(p, group_size) for p in parts]
    mins = None  # int8, or int4 parts without mins (m = -8 s) all
    if parts[0].bits == 4 and any(p.mins is not None for p in parts):
        mins = torch.cat([p.int4_mins().float() for p in parts])
    half = all(p.scales.dtype == torch.float16 for p in parts) and (mins is None or torch.isfinite(mins.half()).all())
    dtype = torch.float16 if half else torch.float32
    return QuantizedWeight(torch.cat([p.q for p in parts]), torch.cat([p.scales.to(dtype) for p in parts]),
                           None if mins is None else mins.to(dtype), parts[0].group_size)


def _same_format(parts: list[QuantizedWeight | torch.Tensor]) -> bool:
    return all(isinstance(p, QuantizedWeight) and p.bits == parts[0].bits and p.group_size == parts[0].group_size
               for p in parts)


def _as_int8(weight: QuantizedWeight) -> QuantizedWeight:
    """An int4 weight as int8 in the same groups: the same numbers, w = s (q - k), where its mins are whole
    multiples of its scales (Q4_0: m = -8 s), else re-quantized (as its type's "int8" mode does); an int8
    weight as it is."""
    if weight.bits != 4:
        return weight
    s, m = weight.scales.float(), weight.int4_mins().float()  # (out, groups)
    k = torch.where(s != 0, -m / s.masked_fill(s == 0, 1), 0)
    if ((k == k.round()) & (k >= 0) & (k <= 127) & ((s != 0) | (m == 0))).all():
        out, width = weight.shape
        values = unpack_int4(weight.q).reshape(out, -1, weight.group_size).to(torch.int16)  # (out, groups, g)
        q = (values - k.to(torch.int16)[..., None]).to(torch.int8).reshape(out, width)
        int8 = QuantizedWeight(q, weight.scales, None, weight.group_size)
        if torch.equal(dequantize(int8), dequantize(weight)):
            return int8
    return quantize_int8(dequantize(weight), weight.group_size)


def _regrouped(weight: QuantizedWeight, group_size: int) -> QuantizedWeight:
    """An int8 weight with groups of `group_size` (dividing its own): each scale repeated, the same numbers."""
    repeat = weight.group_size // group_size
    return QuantizedWeight(weight.q, weight.scales.repeat_interleave(repeat, dim=1), None, group_size)


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
