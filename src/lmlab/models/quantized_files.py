"""Quantized decoder directories: what `lmlab quantize` writes, and the cached quantized form of a GGUF file.

A directory holds config.json (Hugging Face's fields plus our full config under "lmlab", as
`decoder_files.py` writes it), model.safetensors with each quantized layer as `<layer>.qweight`,
`.scales` and (int4) `.mins` beside the float norms, quantization.json (format, version, mode, group size,
and the int4 layers stored without mins, whose m is -8 s: GGUF's Q4_0) and the tokenizer files. `lmlab.load`
reads it back, memory-mapped, as a quantized model.

A directory may come from anyone, so `read_quantized` checks it all against the config before
building anything: every tensor's dtype and shape (int4 packs two numbers a byte; scales give a
group size that divides the layer's width, a multiple of 32 for int4; mins with int4 but the layers listed
without), no tensor missing or left over, and the scales, mins and float weights finite.
"""

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from lmlab.config import config_to_dict
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.json_file import read_json_object
from lmlab.io.weight_checks import check_finite
from lmlab.models import registry
from lmlab.models.decoder_files import read_hf_config, special_ids
from lmlab.models.quantize import MODES, fill_quantized, input_width, quantized_state
from lmlab.modules.meta import on_meta
from lmlab.modules.quantized import QuantizedEmbedding, QuantizedLinear
from lmlab.modules.quantized_formats import RUN
from lmlab.modules.transformer import TransformerDecoder
from lmlab.tokenizers.text import TextTokenizer

QUANTIZATION_FILE, WEIGHTS_FILE = "quantization.json", "model.safetensors"
FORMAT, VERSION = "lmlab-quantized", 1
_FLOATS = {"F16", "F32"}  # what scales and mins may be stored as


def is_quantized_dir(directory: Path) -> bool:
    """Whether `directory` holds a quantized model (a quantization.json beside its config.json)."""
    return (directory / QUANTIZATION_FILE).is_file()


def mode_of(model: TransformerDecoder) -> tuple[str, int | None]:
    """("int4", its group size) if any linear layer of `model` is int4, else ("int8", None)."""
    int4 = [m.group_size for m in model.modules() if isinstance(m, QuantizedLinear) and m.bits == 4]
    return ("int4", max(set(int4), key=int4.count)) if int4 else ("int8", None)


def save_quantized(model: TransformerDecoder, directory: str | Path, tokenizer: TextTokenizer,
                   source: str = "", tokenizer_tables: bool = False) -> Path:
    """Write the quantized `model` and its tokenizer as a model directory, atomically (replacing only a
    directory lmlab wrote). `source` (what it was quantized from) is recorded in quantization.json;
    `tokenizer_tables` saves the tokenizer in the form that loads faster (`TextTokenizer.save`)."""
    cfg = model.config
    convert = registry.lookup(cfg.family, kind="decoder").convert
    hf_config = convert.config_to_hf(cfg) | special_ids(tokenizer, cfg.vocab_size) | {
        "torch_dtype": "float32", "lmlab": config_to_dict(cfg)}
    mode, group_size = mode_of(model)
    without_mins = sorted(name for name, m in model.named_modules()
                          if isinstance(m, (QuantizedLinear, QuantizedEmbedding)) and m.bits == 4 and m.mins is None)
    info = {"format": FORMAT, "version": VERSION, "mode": mode, "group_size": group_size, "source": source,
            "int4_without_mins": without_mins}
    directory = Path(directory)
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2))
        (tmp / QUANTIZATION_FILE).write_text(json.dumps(info, indent=2))
        save_file(quantized_state(model), tmp / WEIGHTS_FILE, metadata={"format": "pt"})
        tokenizer.save(tmp, tables=tokenizer_tables)
    return directory


def read_quantized(directory: str | Path, fix: str = "quantize the model again with `lmlab quantize`",
                   check_values: bool = True) -> TransformerDecoder:
    """The quantized model saved in `directory`, its weights memory-mapped; everything checked first (see
    the module docstring). `fix` ends each one-line error: what the user can do about a bad directory.
    `check_values=False` skips reading the scales for NaN and infinity: for lmlab's own cache, whose
    values were checked when it was written (as the fp32 cache's are)."""
    directory = Path(directory)
    info = read_json_object(directory / QUANTIZATION_FILE, fix)
    if info.get("format") != FORMAT or info.get("version") != VERSION or info.get("mode") not in MODES:
        raise LmlabError(f"{directory / QUANTIZATION_FILE} is not an lmlab quantized model of version {VERSION} "
                         f"(format={info.get('format')!r}, version={info.get('version')!r}, mode="
                         f"{info.get('mode')!r}); {fix}")
    without_mins = info.get("int4_without_mins", [])
    if not isinstance(without_mins, list) or not all(isinstance(name, str) for name in without_mins):
        raise LmlabError(f"{directory / QUANTIZATION_FILE}: int4_without_mins is {str(without_mins)[:80]}, not a "
                         f"list of layer names; {fix}")
    cfg = read_hf_config(directory)
    source = str(directory / WEIGHTS_FILE)
    header = _header(directory / WEIGHTS_FILE, fix)
    with on_meta():
        expected = registry.build(cfg)
    left = dict(header)
    for name, tensor in expected.state_dict().items():
        layer, _, leaf = name.rpartition(".")
        if cfg.tie_embeddings and layer == "lm_head":
            continue
        module = expected.get_submodule(layer)
        if leaf == "weight" and isinstance(module, (nn.Linear, nn.Embedding)) and f"{layer}.qweight" in left:
            _check_quantized(layer, tuple(tensor.shape), input_width(module), layer in without_mins, left, source,
                             fix)
        else:
            _check_float(name, tuple(tensor.shape), left, source, fix)
    if left:
        raise LmlabError(f"{source}: tensors {sorted(left)[:3]} have no place in the model its config describes; {fix}")
    try:
        state = load_file(directory / WEIGHTS_FILE)
    except (SafetensorError, OSError) as e:
        raise LmlabError(f"cannot read {source} ({e}); {fix}") from None
    if check_values:
        _check_finite(state, source)
    return fill_quantized(expected, state)


def _header(path: Path, fix: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (safetensors dtype, shape) of every tensor in `path`, from its header only."""
    try:
        with safe_open(path, framework="pt") as opened:
            return {name: (opened.get_slice(name).get_dtype(), tuple(opened.get_slice(name).get_shape()))
                    for name in opened.keys()}
    except (SafetensorError, OSError, RuntimeError) as e:
        raise LmlabError(f"cannot read {path} ({e}); {fix}") from None


def _check_quantized(layer: str, shape: tuple[int, int], width: int, without_mins: bool, left: dict, source: str,
                     fix: str) -> None:
    """`layer`'s qweight, scales and mins (none if `without_mins`) and bias fit a matrix `shape` (out, in) of
    `width` inputs."""
    out = shape[0]
    q_dtype, q_shape = left.pop(f"{layer}.qweight")
    bits = {"U8": 4, "I8": 8}.get(q_dtype)
    if bits is None:
        raise LmlabError(f"{source}: {layer}.qweight is stored as {q_dtype}, not as uint8 (int4) or int8; {fix}")
    if q_shape != (out, width // 2 if bits == 4 else width) or (bits == 4 and width % 2):
        raise LmlabError(f"{source}: {layer}.qweight has shape {q_shape} but an int{bits} weight of {shape} "
                         f"needs {(out, width // 2 if bits == 4 else width)}; {fix}")
    if f"{layer}.scales" not in left:
        raise LmlabError(f"{source} lacks {layer}.scales; {fix}")
    s_dtype, s_shape = left.pop(f"{layer}.scales")
    groups = s_shape[1] if len(s_shape) == 2 else 0
    if s_dtype not in _FLOATS or len(s_shape) != 2 or s_shape[0] != out or groups < 1 or width % groups:
        raise LmlabError(f"{source}: {layer}.scales is {s_dtype} {s_shape}, not float16/float32 of shape ({out}, "
                         f"groups) with the groups dividing {width}; {fix}")
    if bits == 4 and (width // groups) % RUN:
        raise LmlabError(f"{source}: {layer} is int4 in groups of {width // groups}, not a multiple of {RUN}; {fix}")
    mins = left.pop(f"{layer}.mins", None)
    if bits == 4 and without_mins and mins is not None:
        raise LmlabError(f"{source}: {layer}.mins is there, but {QUANTIZATION_FILE} lists {layer} as int4 without "
                         f"mins; {fix}")
    if bits == 4 and not without_mins and mins != (s_dtype, s_shape):
        raise LmlabError(f"{source}: {layer}.mins is {mins}, but an int4 layer needs mins like its scales "
                         f"({s_dtype}, {s_shape}); {fix}")
    if bits == 8 and mins is not None:
        raise LmlabError(f"{source}: {layer}.mins belongs to no int8 layer (int8 has scales only); {fix}")


def _check_float(name: str, shape: tuple[int, ...], left: dict, source: str, fix: str) -> None:
    """The float tensor `name` is there with `shape`."""
    if name not in left:
        raise LmlabError(f"{source} lacks {name}; {fix}")
    dtype, stored = left.pop(name)
    if stored != shape or dtype != "F32":
        raise LmlabError(f"{source}: {name} is {dtype} {stored} but the config needs a float32 tensor {shape}; {fix}")


def _check_finite(state: dict[str, torch.Tensor], source: str) -> None:
    """No scale, min or float weight holds a NaN or an infinity: one pass over each dtype's tensors joined
    (hundreds of small checks cost more than the data), then `check_finite` names a bad one."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for tensor in state.values():
        if tensor.is_floating_point():
            by_dtype.setdefault(tensor.dtype, []).append(tensor.reshape(-1))
    if not all(torch.isfinite(torch.cat(tensors)).all() for tensors in by_dtype.values()):
        check_finite(state, source)
