"""GGUF files (llama.cpp's format): read, dequantize, and cache as memory-mappable safetensors.

A GGUF file holds the config and the tokenizer in its metadata and the weights in blocks of
quantized numbers. Parsing the metadata and dequantizing every block takes seconds, so the first
load writes the result (our fp32 state dict, config and tokenizer) into the lmlab cache, keyed by
the file's content (`content_key`), never its name; later loads memory-map those safetensors into
a model built on the meta device, which takes a fraction of a second and no extra copy of the weights.

Loaded as "int8" or "int4", the file's blocks are kept quantized instead (`quantized_gguf.py` repacks
them into lmlab's int4 / int8 layers) and cached as a quantized model directory of their own
(`quantized_files.py`), memory-mapped the same way. The tables a model computes (the rotary cos / sin) are
memory-mapped from a file beside either cache (`mapped_tables`), so that only the rows decoding reaches are
resident.

A GGUF file may come from anyone, so the conversion checks it all before use: the tensors' byte
ranges (`check_layout`), the metadata's types and ranges, every tensor's shape against the config,
the tokenizer against the vocabulary, and the dequantized weights (or the quantized scales) for NaN
and infinity.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from gguf import GGMLQuantizationType, ReaderTensor
from gguf.quants import dequantize
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from lmlab.config import ModelConfig, config_from_dict, config_to_dict
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.cache import cache_dir
from lmlab.io.config_file import config_from
from lmlab.io.gguf_layout import content_key, file_identity, remember_content_key
from lmlab.io.weight_checks import check_finite, check_fits
from lmlab.models import registry
from lmlab.models.quantize import MODES as QUANTIZED_MODES
from lmlab.models.quantize import quantized_decoder
from lmlab.models.quantized_files import is_quantized_dir, read_quantized, save_quantized
from lmlab.models.quantized_gguf import (
    assemble,
    file_tensors,
    key_memo,
    open_gguf,
    remember_tensors,
    repack,
    row_sources,
    stored_mode,
)
from lmlab.modules.meta import on_meta
from lmlab.modules.positions import RotaryEmbedding, deferred_rotary_tables
from lmlab.modules.transformer import TransformerDecoder
from lmlab.progress import progress_bar
from lmlab.tokenizers.bpe import return_freed_memory
from lmlab.tokenizers.gguf import tokenizer_from_gguf
from lmlab.tokenizers.text import TextTokenizer

SUPPORTED_TYPES = {getattr(GGMLQuantizationType, name)
                   for name in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K",
                                "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS")}
CONVERTED_VERSION = 3  # bump when the converted layout changes, so old caches are not read
QUANTIZED_VERSION = 4  # the same, for the quantized conversions (`load_gguf_quantized`)
WEIGHTS_FILE, CONFIG_FILE = "model.safetensors", "lmlab.json"


@dataclass(frozen=True)
class GGUFContents:
    metadata: dict  # key -> value (str, int, float, bool or list), the "GGUF.*" header fields left out
    tensors: dict[str, ReaderTensor]  # name -> the file's (memory-mapped, still quantized) tensor
    source: str = "the GGUF file"  # the file's path, for messages


def read_gguf(path: str | Path) -> GGUFContents:
    """The metadata and tensors of the GGUF file at `path`, their byte ranges checked; a damaged or
    foreign file is an LmlabError."""
    reader, metadata = open_gguf(Path(path))
    return GGUFContents(metadata, {t.name: t for t in reader.tensors}, str(path))


def dequantize_tensor(tensor: ReaderTensor) -> torch.Tensor:
    """One GGUF tensor (of a type `_checked` accepted) as fp32, shaped (out, in) like an `nn.Linear` weight."""
    values = dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists the fastest-varying dim first
    values = np.require(values, np.float32, ["C", "W"])  # F32 tensors are read-only views of the file: copy those
    return torch.from_numpy(values.reshape(shape))


def convert_gguf(contents: GGUFContents) -> tuple[TransformerDecoder, TextTokenizer]:
    """Build our model (fp32) and tokenizer from a read GGUF file, checking every part against the
    config before the weights are dequantized, and the weights for NaN and infinity after."""
    cfg, family, tokenizer = _checked(contents)
    tensors = dict(zip(contents.tensors, converted_tensors(contents, dequantize_tensor), strict=True))
    check_finite(tensors, contents.source)
    return _assemble(cfg, family.from_gguf(tensors, cfg)), tokenizer


def convert_gguf_quantized(contents: GGUFContents, mode: str) -> tuple[TransformerDecoder, TextTokenizer]:
    """Build our model with its matrices kept quantized (`quantized_gguf.py`'s table `KEPT`: each block type on
    the kernel that holds its numbers exactly, the rest re-quantized to int8 in groups) and tokenizer, with the
    same checks as `convert_gguf`: no fp32 copy is made of a matrix kept as it is stored."""
    cfg, family, tokenizer = _checked(contents)
    shapes = {name: tuple(int(n) for n in reversed(t.shape)) for name, t in contents.tensors.items()}
    packed = converted_tensors(contents, lambda tensor: repack(tensor, mode, dequantize_tensor))
    state = assemble(row_sources(family.from_gguf, shapes, cfg), packed,
                     skip={"lm_head.weight"} if cfg.tie_embeddings else set())
    check_finite(state, contents.source)
    return quantized_decoder(cfg, state), tokenizer


def converted_tensors(contents: GGUFContents, convert: Callable[[ReaderTensor], object]) -> list:
    """`convert` of each of the file's tensors, in order, counted in bytes on a progress bar with an ETA on
    stderr: the first load of a GGUF file converts it (a minute or two for a 135M model) before anything runs."""
    tensors = list(contents.tensors.values())
    converted = []
    with progress_bar(sum(int(t.n_bytes) for t in tensors), desc=f"converting {Path(contents.source).name} (once)",
                      unit="B", unit_scale=True, leave=False) as bar:  # on a terminal, erased when done
        for tensor in tensors:
            converted.append(convert(tensor))
            bar.update(int(tensor.n_bytes))
    return converted


def _checked(contents: GGUFContents) -> tuple[ModelConfig, ModuleType, TextTokenizer]:
    """(config, family's GGUF conversion module, tokenizer) of a read GGUF file, after checking the metadata,
    the tokenizer against the vocabulary and every tensor's shape against the config. The family is the
    registry's that reads the file's `general.architecture` (`registry.lookup_gguf`)."""
    source = contents.source
    family = registry.lookup_gguf(contents.metadata.get("general.architecture"), source).gguf
    shapes = {name: tuple(int(n) for n in reversed(t.shape)) for name, t in contents.tensors.items()}
    cfg = config_from(source, lambda: family.config_from_gguf(
        contents.metadata, shapes, lambda name: dequantize_tensor(contents.tensors[name])), "download the file again")
    tokenizer = tokenizer_from_gguf(contents.metadata)  # before the slow part, so its errors come at once
    if tokenizer.vocab_size > cfg.vocab_size:
        raise LmlabError(f"{source}: the tokenizer has {tokenizer.vocab_size} tokens but token_embd.weight only "
                         f"{cfg.vocab_size} rows; the file is damaged, download it again")
    with on_meta():
        expected = registry.build(cfg).state_dict()
    try:
        meta = family.from_gguf({name: torch.empty(shape, device="meta") for name, shape in shapes.items()}, cfg)
    except RuntimeError as e:
        raise LmlabError(f"the tensors in {source} do not fit its metadata ({str(e).splitlines()[0]}); download "
                         "the file again") from None
    check_fits(expected, meta, source)
    for t in contents.tensors.values():
        if t.tensor_type not in SUPPORTED_TYPES:
            raise LmlabError(f"tensor '{t.name}' is stored as {t.tensor_type.name}, which lmlab does not read yet; "
                             f"use a file quantized as one of {sorted(t.name for t in SUPPORTED_TYPES)}")
    return cfg, family, tokenizer


def load_gguf(path: str | Path, dtype: torch.dtype | str | None = torch.float32) -> tuple[TransformerDecoder,
                                                                                          TextTokenizer]:
    """(model, tokenizer) from a GGUF file, converted once and memory-mapped from the cache after. `dtype`
    is a float dtype (the fp32 conversion, cast), "int8" / "int4" (kept quantized, its own cache), or None:
    as stored, as llama.cpp runs it (`quantized_gguf.stored_mode`: a Q4 file as int4, another quantized file
    as int8, a float file as fp32), which `lmlab.load` gives when no dtype is asked."""
    path = Path(path)
    if not path.is_file():
        raise LmlabError(f"GGUF file '{path}' does not exist; check the path")
    identity, key = file_identity(path), content_key(path, key_memo())
    listing = file_tensors(path, key, remember=False) if dtype is None else None
    if listing is not None:
        dtype = stored_mode(listing[1]) or torch.float32
    if dtype in QUANTIZED_MODES:
        loaded = load_gguf_quantized(path, dtype, key)
    else:
        converted = converted_dir(path, key)
        if not (converted / WEIGHTS_FILE).is_file():
            model, tokenizer = convert_gguf(read_gguf(path))
            save_converted(model, tokenizer, converted)
        with deferred_rotary_tables():
            model, tokenizer = load_converted(converted)
        loaded = mapped_tables(model, converted).to(dtype), tokenizer
    remember_content_key(path, identity, key, key_memo())  # only once it loaded: a refused file leaves no trace
    if listing is not None:
        remember_tensors(path, listing, key)
    return loaded


def load_gguf_quantized(path: Path, mode: str, key: str) -> tuple[TransformerDecoder, TextTokenizer]:
    """(model, tokenizer) from a GGUF file with its matrices kept quantized (`mode` "int8" or "int4"): converted
    once into the cache as a quantized model directory (`quantized_files.py`), memory-mapped from it after.
    `key`: the file's `content_key`."""
    converted = cache_dir("gguf") / f"{path.stem}-{key}-{mode}-q{QUANTIZED_VERSION}"
    if not is_quantized_dir(converted):
        model, tokenizer = convert_gguf_quantized(read_gguf(path), mode)
        save_quantized(model, converted, tokenizer, source=str(path), tokenizer_tables=True)
    fix = f"delete the folder '{converted}' and load again"
    with deferred_rotary_tables():
        model = read_quantized(converted, fix, check_values=False)
    return mapped_tables(model, converted), TextTokenizer.from_dir(converted)


def mapped_tables(model: TransformerDecoder, converted: Path) -> TransformerDecoder:
    """`model`, built with its rotary tables deferred (`deferred_rotary_tables`), with its cos / sin tables
    memory-mapped from a file beside its cache folder `converted`, written there the first time: a mapped
    table is resident only in the pages decoding reads (the rows of the positions it reaches), where a computed
    one holds every position (SmolLM2: 8192 x 64, cos and sin, 4 MiB), and computing them leaves torch's
    trigonometry code resident (2-3 MiB). The file records what each table is computed from
    (`RotaryEmbedding.table_key`); one made from anything else (another lmlab, another torch) is made again.
    One that cannot be written leaves computed tables in place."""
    rotaries = {name: m for name, m in model.named_modules() if isinstance(m, RotaryEmbedding)}
    keys = {name: m.table_key() for name, m in rotaries.items()}
    shapes = {f"{name}.{part}": (m.max_len, m.head_dim) for name, m in rotaries.items() for part in ("cos", "sin")}
    file = converted.parent / f"{converted.name}-tables.safetensors"
    try:
        tables = load_file(file) if _table_keys(file) == keys else {}
        if {name: tuple(table.shape) for name, table in tables.items()} != shapes:
            with atomic_path(file) as tmp:
                save_file(_computed(rotaries), tmp, metadata=keys)
            tables = load_file(file)
    except (OSError, SafetensorError, LmlabError):
        tables = _computed(rotaries)
    for name, table in tables.items():
        owner, _, part = name.rpartition(".")
        rotaries[owner].register_buffer(part, table, persistent=False)
    return_freed_memory()
    return model


def _computed(rotaries: dict[str, RotaryEmbedding]) -> dict[str, torch.Tensor]:
    """Each rotary module's tables, computed, named as the tables file names them."""
    return {f"{name}.{part}": table for name, m in rotaries.items() for part, table in zip(("cos", "sin"), m.tables())}


def _table_keys(file: Path) -> dict[str, str] | None:
    """The table keys a tables file records (its safetensors metadata), None when there is no such file."""
    if not file.is_file():
        return None
    with safe_open(file, "pt") as f:
        return f.metadata() or {}


def converted_dir(path: Path, key: str | None = None) -> Path:
    """Where the conversion of the GGUF file at `path` lives: named after its content (`content_key`, or `key`
    when the caller has it) and the converted layout's version; the file's name only labels the folder."""
    return cache_dir("gguf") / f"{path.stem}-{key or content_key(path, key_memo())}-v{CONVERTED_VERSION}"


def save_converted(model: TransformerDecoder, tokenizer: TextTokenizer, directory: Path) -> None:
    """Write weights (the tied LM head once), config and tokenizer into `directory`, atomically."""
    cfg: ModelConfig = model.config
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()
             if not (cfg.tie_embeddings and k == "lm_head.weight")}
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        save_file(state, tmp / WEIGHTS_FILE)
        (tmp / CONFIG_FILE).write_text(json.dumps(config_to_dict(cfg), indent=2))
        tokenizer.save(tmp, tables=True)


def load_converted(directory: Path) -> tuple[TransformerDecoder, TextTokenizer]:
    """The model (weights memory-mapped, not copied) and tokenizer that `save_converted` wrote."""
    try:
        cfg = config_from_dict(json.loads((directory / CONFIG_FILE).read_text()))
        state = load_file(directory / WEIGHTS_FILE)
    except (OSError, ValueError, SafetensorError) as e:
        raise LmlabError(f"the converted model in '{directory}' is damaged ({e}); delete that folder and "
                         "load again") from None
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["token_embedding.weight"]
    return _assemble(cfg, state), TextTokenizer.from_dir(directory)


def _assemble(cfg: ModelConfig, state: dict[str, torch.Tensor]) -> TransformerDecoder:
    """A model for `cfg` that takes `state`'s tensors as its own (built on meta: no init, no copy)."""
    with on_meta():
        model = registry.build(cfg)
    model.load_state_dict(state, assign=True)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.token_embedding.weight
    return model.eval()
