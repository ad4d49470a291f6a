"""`lmlab.load`: a model and its tokenizer from wherever they are; `load_encoder` for BERT encoders.
Which reader a model directory needs is its config.json's `model_type`, looked up in the registry; a
quantization.json beside it marks a quantized decoder (`quantized_files.py`)."""

from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.io import zoo
from lmlab.io.json_file import read_json_object
from lmlab.models import registry
from lmlab.models.bert.model import BertEncoder
from lmlab.models.decoder_files import load_hf_dir
from lmlab.models.encoder_files import load_hf_encoder_dir
from lmlab.models.family import LOAD, Family
from lmlab.models.llama.gguf_file import load_gguf
from lmlab.models.number_formats import ACTIVATIONS, DTYPE_NAMES
from lmlab.models.peft_files import load_peft
from lmlab.models.quantize import MODES, dequantize_model, quantize_model
from lmlab.models.quantized_files import is_quantized_dir, mode_of, read_quantized
from lmlab.models.quantized_gguf import activation_kinds
from lmlab.models.stateful import StatefulLM
from lmlab.modules.activation_rounding import KERNEL_CODES
from lmlab.modules.quantized import QuantizedLinear
from lmlab.modules.transformer import TransformerDecoder
from lmlab.tokenizers.bpe import TOKENIZER_FILE, return_freed_memory
from lmlab.tokenizers.text import TextTokenizer, has_tokenizer
from lmlab.tokenizers.wordpiece import load_wordpiece
from tokenizers import Tokenizer

DTYPES = dict(zip(DTYPE_NAMES, (torch.float32, torch.bfloat16, "int8", "int4"), strict=True))  # --dtype -> what it loads


def load(name_or_path: str | Path, dtype: torch.dtype | str | None = None, group_size: int = 32,
         adapter: str | Path | None = None, activations: str | None = None,
         ) -> tuple[TransformerDecoder | StatefulLM, TextTokenizer]:
    """(model, tokenizer) from a zoo name, a .gguf file, an HF-layout model directory, an lmlab run
    directory (its model/, or for a post-training run that saved only its adapter, its base model with the
    adapter loaded), a quantized model directory (`lmlab quantize`), or the directory of an n-gram,
    window or RNN model (`lmlab train --arch`). A zoo model must be downloaded first (`lmlab download NAME`).

    `dtype`: None (as stored: a quantized GGUF file as int4 / int8, as llama.cpp runs it, `gguf_file.load_gguf`;
    a quantized directory as saved; anything else fp32), a torch float dtype, or one of "fp32", "bf16", "int8",
    "int4". int8 / int4 give a decoder with quantized linear layers (`models/quantize.py`): a GGUF
    file keeps its quantized blocks where a kernel holds them exactly (Q4 types as int4 with "int4"; Q8_0, Q5_0,
    Q6_K, Q3_K and IQ4 as int8; `quantized_gguf.py`), a float
    model is quantized after loading (int4 in groups of `group_size`). Training and gradients need float
    weights: ask for "fp32" there.

    `adapter`: a directory of a PEFT adapter (peft's `save_pretrained` layout or lmlab's) trained on this
    model, loaded onto it (`models/peft_files.load_peft`, which checks the base); float weights only
    (dtype None loads fp32).

    `activations`: what the int8 / int4 matrices multiply. "int8": each quantized matrix's input is rounded
    to 8 bits in blocks first, as llama.cpp rounds it for the GGUF type the weight came from
    (`modules/activation_rounding.py`; Q8_0's blocks of 32 for a model lmlab quantized), so that lmlab running
    a GGUF file computes what llama.cpp computes on it, with integer products. "fp32": the kernels multiply
    fp32 activations (the more accurate, and what HF computes on the dequantized weights). None (the
    default): as llama.cpp runs the file: int8 for the matrices that keep a GGUF file's quantized blocks
    (`_as_llama_cpp`), fp32 for everything else."""
    if activations is None:
        return _as_llama_cpp(load(name_or_path, dtype, group_size, adapter, "fp32"), name_or_path)
    if activations != "fp32":
        return _with_rounding(load(name_or_path, dtype, group_size, adapter, "fp32"), name_or_path, activations)
    if adapter is not None:
        return _with_adapter(load(name_or_path, torch.float32 if dtype is None else dtype, group_size,
                                  activations="fp32"), adapter, dtype)
    dtype = checked_dtype(dtype)
    path = zoo_or_path(name_or_path)
    if path.is_file():
        if path.suffix != ".gguf":
            raise LmlabError(f"'{path}' is a file but not a .gguf model; pass a .gguf file or a model directory")
        return load_gguf(path, dtype)
    if (path / "model" / "config.json").is_file():
        path = path / "model"
    elif (path / "adapter").is_dir() and (path / "run.json").is_file():
        return _adapter_run(path, dtype)
    if not path.exists():
        raise LmlabError(f"model '{name_or_path}' not found; pass a .gguf file, a model directory (config.json + "
                         f"model.safetensors), an lmlab run directory, or a zoo name: {', '.join(zoo.ZOO)}")
    if not (path / "config.json").is_file():
        raise LmlabError(f"'{name_or_path}' holds no finished model (no config.json); if it is a run that was "
                         "stopped, finish it with `lmlab train … --resume`")
    family = _family(path)
    if not has_tokenizer(path):
        raise LmlabError(f"'{path}' has no {TOKENIZER_FILE} (nor a SentencePiece tokenizer.model); put the model's "
                         "tokenizer next to its weights")
    if is_quantized_dir(path):
        model = _as_dtype(read_quantized(path), dtype, path)
    elif family and family.read:
        if dtype in MODES:
            raise LmlabError(f"'{path}' holds a {family.title}; --dtype {dtype} quantizes transformer decoders only, "
                             "load it without one")
        model = family.read(path)
    else:
        model = load_hf_dir(path, dtype if isinstance(dtype, torch.dtype) else torch.float32)
        if dtype in MODES:
            model = quantize_model(model, dtype, group_size)
    tokenizer = TextTokenizer.from_dir(path)
    _check_tokenizer_fits(tokenizer.vocab_size, model.config.vocab_size, path)
    return model, tokenizer


def _with_adapter(loaded: tuple, adapter: str | Path, dtype) -> tuple[TransformerDecoder, TextTokenizer]:
    """The loaded (model, tokenizer) with the adapter in directory `adapter` on the model, in eval mode."""
    if dtype in MODES:
        raise LmlabError(f"--adapter applies to a float model's linear layers, not to {dtype} weights; drop "
                         f"--dtype {dtype}, or merge the adapter first (`lmlab export`)")
    model, tokenizer = loaded
    return load_peft(model, adapter).eval(), tokenizer


def _with_rounding(loaded: tuple, name_or_path: str | Path, activations: str) -> tuple[TransformerDecoder,
                                                                                        TextTokenizer]:
    """The loaded (model, tokenizer) with every quantized matrix's input rounded as llama.cpp rounds it
    (`activations` "int8"): for a GGUF file by each matrix's type (`quantized_gguf.activation_kinds`), else
    as Q8_0 does (blocks of 32)."""
    if activations not in ACTIVATIONS:
        raise LmlabError(f"activations {activations!r} is not one lmlab computes with; use one of "
                         f"{', '.join(ACTIVATIONS)}")
    model, tokenizer = loaded
    layers = _quantized_layers(model)
    if not layers:
        raise LmlabError("--activations int8 rounds the inputs of int8 / int4 matrices, and this model has none; "
                         "add --dtype int8 or int4")
    kinds = _gguf_roundings(model, zoo_or_path(name_or_path))
    for name, layer in layers.items():
        layer.activations = kinds.get(name, "q8_0")
    return model, tokenizer


def _as_llama_cpp(loaded: tuple, name_or_path: str | Path) -> tuple[TransformerDecoder | StatefulLM, TextTokenizer]:
    """The loaded (model, tokenizer), with the input of each quantized matrix that came from a quantized GGUF
    type (Q4_0, Q4_1, Q8_0, the K-quants, ...) rounded to 8 bits as llama.cpp rounds it for that type: `load`'s
    default, so that a quantized GGUF file runs as llama.cpp runs it (the same arithmetic, integer products).
    Matrices from float tensors (F16, BF16, F32: llama.cpp multiplies those in floats) and models that are not
    GGUF files keep fp32 activations, and so does every matrix of a file where one layer of ours stacks parts
    llama.cpp rounds differently (`activation_kinds` refuses it)."""
    model, _ = loaded
    layers = _quantized_layers(model)
    if not layers:  # an fp32 load: no file tensors to list
        return loaded
    try:
        kinds = _gguf_roundings(model, zoo_or_path(name_or_path))
    except LmlabError:
        return loaded
    for name, layer in layers.items():
        if kinds.get(name) in KERNEL_CODES:
            layer.activations = kinds[name]
    return loaded


def _quantized_layers(model) -> dict[str, QuantizedLinear]:
    """The model's int8 / int4 linear layers by name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, QuantizedLinear)}


def _gguf_roundings(model, path: Path) -> dict[str, str | None]:
    """How llama.cpp rounds the input of each of the model's layers when `path` is a GGUF file
    (`quantized_gguf.activation_kinds`, which refuses a layer stacking parts rounded differently); else {}."""
    if path.suffix != ".gguf":
        return {}
    kinds = activation_kinds(path, model.config)
    return_freed_memory()  # the row labels activation_kinds traced (7 MiB for SmolLM2), freed but resident
    return kinds


def _adapter_run(run: Path, dtype: torch.dtype | str | None) -> tuple[TransformerDecoder, TextTokenizer]:
    """A post-training run that saved only its adapter (no merged model: prefix, prompt or bottleneck
    tuning, or LoRA on a tied head): the base model its run.json names with the adapter loaded onto it, in
    eval mode, as `load(base, adapter=run)` gives it (fp32, the weights it was trained on)."""
    if dtype not in (None, torch.float32, "fp32"):
        raise LmlabError(f"'{run}' holds an adapter without a merged model, which runs on its fp32 base model; "
                         "drop --dtype (a LoRA run's merged model takes any)")
    return load(read_json_object(run / "run.json", "finish the run with --resume")["base_model"], adapter=run)


def checked_dtype(dtype: torch.dtype | str | None) -> torch.dtype | str | None:
    """`dtype` as `load` uses it: None, a torch float dtype, or "int8" / "int4" (a name in DTYPES is mapped);
    anything else is one line naming the valid ones."""
    if dtype is None or (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise LmlabError(f"dtype {dtype!r} is not one lmlab loads; use one of {', '.join(DTYPES)} or a torch float dtype")


def _as_dtype(model: TransformerDecoder, dtype: torch.dtype | str | None, path: Path) -> TransformerDecoder:
    """A quantized model read from `path`, as `dtype` asks: as saved (None or its own mode), dequantized to a
    float dtype; another quantization is refused (re-quantizing rounded weights compounds the error)."""
    saved, _ = mode_of(model)
    if dtype is None or dtype == saved:
        return model
    if isinstance(dtype, torch.dtype):
        return dequantize_model(model).to(dtype)
    raise LmlabError(f"'{path}' holds an {saved} model; load it as {saved} (or fp32 / bf16), or quantize the "
                     f"original model to {dtype} with `lmlab quantize --to {dtype}`")


def _family(path: Path) -> Family | None:
    """The registry's record of the model in `path` if it is one `lmlab.load` reads; any other family is one
    line naming what reads it. None when config.json names no model_type (read_hf_config reports why)."""
    try:
        model_type = read_json_object(path / "config.json", "").get("model_type")
    except LmlabError:
        return None  # read_hf_config reports a broken config.json
    if not isinstance(model_type, str):
        return None
    family = registry.lookup(model_type, str(path))
    if family.reader != LOAD:
        then = (" and generate with lmlab.generation.encoder_decoder.generate_encoder_decoder, or fine-tune it with "
                "`lmlab finetune --task text-to-text`") if family.kind == "encoder-decoder" else ""
        raise LmlabError(f"'{path}' holds a {family.title}, which is not supported by lmlab.load (nor lmlab "
                         f"generate, eval perplexity): use {family.reader}{then}")
    return family


def _check_tokenizer_fits(tokens: int, vocab_size: int, source: Path) -> None:
    """Refuse a tokenizer of `tokens` tokens that gives ids the model (of `vocab_size` rows) has no row for."""
    if tokens > vocab_size:
        raise LmlabError(f"{source}: the tokenizer has {tokens} tokens but the model's vocabulary only {vocab_size}; "
                         "put the model's own tokenizer next to its weights")


def load_encoder(name_or_path: str | Path, dtype: torch.dtype = torch.float32) -> tuple[BertEncoder, Tokenizer]:
    """(encoder, tokenizer) from a zoo name, an HF encoder directory (BERT, RoBERTa, ALBERT or ELECTRA:
    config.json + model.safetensors + tokenizer.json or vocab.txt) or an `lmlab train` run directory
    of an encoder (its model/). The tokenizer pads a batch to its longest text; turn texts into the
    encoder's inputs with `lmlab.tokenizers.wordpiece.encode_batch`. ALBERT gives an `AlbertEncoder`,
    which has BertEncoder's interface."""
    path = zoo_or_path(name_or_path)
    if (path / "model" / "config.json").is_file():
        path = path / "model"
    if not (path / "config.json").is_file():
        raise LmlabError(f"encoder '{name_or_path}' not found; pass an HF encoder model directory (config.json + "
                         f"model.safetensors), an lmlab run directory or a zoo name: {', '.join(zoo.ZOO)}")
    model = load_hf_encoder_dir(path, dtype)
    tokenizer = load_wordpiece(path, model.config.max_tokens)
    _check_tokenizer_fits(tokenizer.get_vocab_size(), model.config.vocab_size, path)
    return model, tokenizer


def zoo_or_path(name_or_path: str | Path) -> Path:
    """The downloaded model of a zoo name, else `name_or_path` as a path."""
    path = Path(name_or_path)
    if not path.exists() and str(name_or_path) in zoo.ZOO:
        path = zoo.model_path(str(name_or_path))
        if path is None:
            raise LmlabError(f"zoo model '{name_or_path}' is not downloaded yet; run `lmlab download {name_or_path}`")
    return path
