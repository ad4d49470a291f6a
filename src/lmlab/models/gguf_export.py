"""A decoder and its tokenizer written as one GGUF file that llama.cpp (and Ollama, LM Studio) load: the inverse
of `models/llama/gguf_file.py`.

The family's GGUF module (`Family.gguf`) names the architecture and gives its metadata (`config_to_gguf`)
and tensor layout (`LAYOUT`, through Llama's `to_gguf`); the tokenizer is `tokenizers/gguf_write.py`'s. Before
anything is written, the metadata is read back with the family's own `config_from_gguf`: a setting the
architecture's keys cannot hold (an efficient attention method, Gemma's query scale) would make llama.cpp
compute another model, so it is refused in one line instead.

Writing and quantizing are gguf-py's (`GGUFWriter`, `gguf.quants.quantize`), the library llama.cpp's own
converter uses. gguf-py quantizes Q8_0 and Q4_0 but has no Q4_K quantizer (it only dequantizes the k-quants):
Q4_K is `models/gguf_q4_k.py`'s, llama.cpp's reference quantizer in numpy. As in llama.cpp's converter,
vectors (norms, biases, RoPE factors) stay F32, and a matrix whose rows are no whole number of quantization
blocks (32 numbers; 256 for Q4_K) is stored F16.
"""

import math
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.models import registry
from lmlab.models.decoder_files import differences
from lmlab.models.gguf_q4_k import quantize_q4_k
from lmlab.models.llama.gguf import to_gguf
from lmlab.models.llama.rope_freqs import llama3_factors
from lmlab.models.number_formats import GGUF_EXPORT_TYPES
from lmlab.modules.transformer import TransformerDecoder
from lmlab.tokenizers.gguf_write import gguf_vocabulary, metadata
from lmlab.tokenizers.text import TextTokenizer

# --dtype -> the GGUF type of the matrices; llama.cpp's general.file_type of that choice
DTYPES = {name: Q[name.upper()] for name in GGUF_EXPORT_TYPES}  # "q8_0" -> Q.Q8_0
FILE_TYPES = {Q.F32: 0, Q.F16: 1, Q.Q4_0: 2, Q.Q8_0: 7, Q.Q4_K: 14, Q.BF16: 32}  # LLAMA_FTYPE_ALL_F32, …, MOSTLY_Q4_K_S
LLAMA3_FIELDS = {"rope_original_context", "rope_low_freq_factor", "rope_high_freq_factor"}


def save_gguf(model: TransformerDecoder, tokenizer: TextTokenizer, path: str | Path, dtype: str = "f16",
              name: str = "") -> Path:
    """Write `model` and `tokenizer` as the GGUF file `path` (atomically), its matrices as `dtype` (a key of
    DTYPES); `name` is the file's general.name."""
    qtype = checked_dtype(dtype)
    cfg: ModelConfig = model.config
    family = gguf_module(cfg)
    tensors = {g: t.detach().float().cpu() for g, t in to_gguf(model.state_dict(), cfg, family.LAYOUT).items()}
    keys = checked_metadata(cfg, family, tensors)
    vocabulary = metadata(gguf_vocabulary(tokenizer))
    if tokenizer.vocab_size > cfg.vocab_size:
        raise LmlabError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model only {cfg.vocab_size} "
                         "embeddings; export the tokenizer the model was trained with")
    with atomic_path(path) as tmp:
        writer = gguf.GGUFWriter(str(tmp), family.ARCHITECTURE)
        writer.add_name(name or Path(path).stem)
        writer.add_file_type(FILE_TYPES[qtype])
        for key, value in (keys | vocabulary).items():
            _add(writer, key, value)
        for tensor_name, tensor in tensors.items():
            values = tensor.numpy()
            stored = tensor_type(values.shape, qtype)
            blocks = quantize_q4_k(values) if stored == Q.Q4_K else gguf.quants.quantize(values, stored)
            writer.add_tensor(tensor_name, blocks, raw_dtype=stored)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return Path(path)


def checked_dtype(dtype: str) -> Q:
    """The GGUF type of `--dtype dtype`; another is one line naming the types lmlab writes."""
    if dtype not in DTYPES:
        raise LmlabError(f"--dtype {dtype} is not a GGUF type lmlab writes; choose one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def tensor_type(shape: tuple[int, ...], qtype: Q) -> Q:
    """How one tensor is stored: vectors F32, matrices `qtype` (F16 where a row is no whole number of blocks)."""
    if len(shape) < 2:
        return Q.F32
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    return qtype if shape[-1] % block == 0 else Q.F16


def gguf_module(cfg: ModelConfig):
    """The family's GGUF module; a family without a GGUF form (no llama.cpp architecture lmlab writes) is one
    line naming the families that have one."""
    family = registry.lookup(cfg.family, kind="decoder")
    if family.gguf is None or not hasattr(family.gguf, "config_to_gguf"):
        writable = [f.name for f in registry.FAMILIES.values() if f.gguf is not None and hasattr(f.gguf, "config_to_gguf")]
        raise LmlabError(f"a {cfg.family} model has no GGUF architecture lmlab writes (it writes "
                         f"{', '.join(writable)}); export it --to hf instead")
    if cfg.attention != "full":
        raise LmlabError(f"the model computes attention={cfg.attention}, which llama.cpp does not (it computes full "
                         "attention); export it --to hf for lmlab instead")
    return family.gguf


def checked_metadata(cfg: ModelConfig, family, tensors: dict[str, torch.Tensor]) -> dict:
    """The architecture's keys for `cfg`, after reading them back (as the file will hold them) gives the same
    model; a setting they cannot hold is one line naming it."""
    keys = family.config_to_gguf(cfg)
    stored = {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in keys.items()}
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    try:
        back = family.config_from_gguf(stored, shapes, lambda name: tensors[name])
    except LmlabError as e:
        raise LmlabError(f"GGUF's {family.ARCHITECTURE} cannot hold this {cfg.family} model ({e})") from None
    lost = [name for name in differences(cfg, back) if not _same(cfg, back, name)]
    if lost:
        said = ", ".join(f"{name}={getattr(cfg, name)!r}" for name in lost)
        raise LmlabError(f"GGUF's {family.ARCHITECTURE} cannot hold this {cfg.family} model's {said} (llama.cpp would "
                         "compute another model); export it --to hf instead")
    return keys


def _same(cfg: ModelConfig, back: ModelConfig, name: str) -> bool:
    """Whether a setting that reads back differently still makes the same model: a float within fp32's
    rounding, or llama3 RoPE settings with the same factors."""
    ours, theirs = getattr(cfg, name), getattr(back, name)
    if isinstance(ours, float) and isinstance(theirs, float):
        return math.isclose(ours, theirs, rel_tol=1e-6)
    return name in LLAMA3_FIELDS and torch.allclose(llama3_factors(cfg), llama3_factors(back), rtol=1e-6)


def _add(writer: gguf.GGUFWriter, key: str, value) -> None:
    """One metadata key with llama.cpp's type for it: integers uint32, numbers float32, id lists int32."""
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif value and isinstance(value[0], int):
        writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)
    else:
        writer.add_array(key, value)
