"""Encoder-decoder model directories in Hugging Face layout: `config.json` + `model.safetensors`
(+ `tokenizer.json`).

`save_encoder_decoder` writes tensors under HF's names and config.json under HF's fields, so
transformers loads the directory (BartForConditionalGeneration, MarianMTModel, …); config.json
also carries our full config under "lmlab", for choices HF's schema has no field for.
`load_encoder_decoder` reads such a directory back, or one written by transformers'
`save_pretrained`, through the converter module of its `model_type` (CONVERTERS): each offers
config_from_hf, config_to_hf, from_hf and to_hf.
"""

from pathlib import Path
from types import ModuleType

import torch
from tokenizers import Tokenizer

from lmlab.errors import LmlabError
from lmlab.io.config_file import config_from
from lmlab.io.hf import read_config_json, read_safetensors, safetensors_files, write_hf_dir
from lmlab.io.weight_checks import check_layer_bound, checked_state, safetensors_header
from lmlab.models.bart import convert as bart
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig, config_from_dict, config_to_dict
from lmlab.models.encoder_decoder.model import EncoderDecoder
from lmlab.models.encoders import ENCODER_FAMILIES
from lmlab.models.registry import FAMILIES
from lmlab.models.t5 import convert as t5
from lmlab.models.transformer import convert as marian
from lmlab.tokenizers.bpe import TOKENIZER_FILE

CONVERTERS: dict[str, ModuleType] = {"bart": bart, "marian": marian, "t5": t5}  # HF model_type -> its converter module

# the HF model_type a family is saved as, where the two names differ
_SAVED_AS = {"transformer": marian.MODEL_TYPE}

# model_types of decoder-only models lmlab reads (with lmlab.load): HF ones and its own pre-transformer LMs
_DECODER_ONLY = tuple(name for name in FAMILIES if name not in ENCODER_FAMILIES) + ("ngram", "window", "rnn")


def save_encoder_decoder(model: EncoderDecoder, tokenizer: Tokenizer | str | Path | None, out_dir: str | Path) -> Path:
    """Write `model` and `tokenizer` (an HF `tokenizers.Tokenizer` or the path of a tokenizer.json)
    as an HF model directory that `load_encoder_decoder` and transformers read, atomically."""
    cfg: EncoderDecoderConfig = model.config
    convert = converter(_SAVED_AS.get(cfg.family, cfg.family))
    dtype = str(model.lm_head.weight.dtype).removeprefix("torch.")
    hf_config = convert.config_to_hf(cfg) | {"torch_dtype": dtype, "lmlab": config_to_dict(cfg)}
    if isinstance(tokenizer, (str, Path)):
        tokenizer = _read_tokenizer(Path(tokenizer))
    return write_hf_dir(out_dir, hf_config, _one_name_per_tensor(convert.to_hf(model.state_dict(), cfg)), tokenizer)


def load_encoder_decoder(model_dir: str | Path, dtype: torch.dtype = torch.float32
                         ) -> tuple[EncoderDecoder, Tokenizer | None]:
    """(model, tokenizer) from an encoder-decoder directory written by `save_encoder_decoder` or by
    transformers (config.json + *.safetensors), or from a run directory holding one as model/.
    The tokenizer is the directory's tokenizer.json, None when it has none."""
    path = Path(model_dir)
    if (path / "model" / "config.json").is_file():
        path = path / "model"
    hf = _read_config(path)
    convert = converter(_encoder_decoder_type(path, hf))
    source = str(path / "config.json")
    if "lmlab" in hf:
        cfg = config_from(source, lambda: config_from_dict(hf["lmlab"]))
    else:
        cfg = config_from(source, lambda: convert.config_from_hf(hf), "re-save the model with transformers")
    header = safetensors_header(safetensors_files(path))
    check_layer_bound({"encoder layers": cfg.n_encoder_layers, "decoder layers": cfg.n_decoder_layers}, header,
                      str(path))
    with torch.device("meta"):
        model = build_encoder_decoder(cfg)
    state, _ = checked_state(model, lambda hf_state: convert.from_hf(hf_state, cfg), header,
                             lambda: read_safetensors(path), str(path))
    model.load_state_dict(state, assign=True)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.shared.weight
    tokenizer = _read_tokenizer(path / TOKENIZER_FILE) if (path / TOKENIZER_FILE).is_file() else None
    return model.to(dtype).eval(), tokenizer


def converter(model_type: str) -> ModuleType:
    """The HF conversion module of an encoder-decoder model_type (bart, marian, …)."""
    if model_type not in CONVERTERS:
        raise LmlabError(f"'{model_type}' is not an encoder-decoder lmlab reads; it reads: {', '.join(CONVERTERS)}")
    return CONVERTERS[model_type]


def _read_config(path: Path) -> dict:
    if not path.is_dir():
        raise LmlabError(f"encoder-decoder model directory '{path}' not found; pass a directory written by "
                         "save_encoder_decoder or transformers' save_pretrained (config.json + model.safetensors)")
    return read_config_json(path, "pass a directory written by save_encoder_decoder or transformers' save_pretrained")


def _encoder_decoder_type(path: Path, hf: dict) -> str:
    """The directory's model_type, or one clear line saying why it is not an encoder-decoder lmlab reads."""
    model_type = hf.get("model_type")
    readable = ", ".join(CONVERTERS)
    if model_type in CONVERTERS:
        return model_type
    if model_type in _DECODER_ONLY:
        raise LmlabError(f"'{path}' holds a {model_type} model, which is a decoder-only model; seq2seq needs an "
                         f"encoder-decoder ({readable})")
    if model_type in ENCODER_FAMILIES:
        raise LmlabError(f"'{path}' holds a {model_type} model, which is an encoder-only model; seq2seq needs an "
                         f"encoder-decoder ({readable})")
    raise LmlabError(f"'{path}' holds a model of model_type {model_type!r}, which lmlab does not read as an "
                     f"encoder-decoder; it reads: {readable}")


def _read_tokenizer(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception for unreadable or malformed files
        raise LmlabError(f"cannot read tokenizer '{path}' ({e}); pass a tokenizer.json file") from None


def _one_name_per_tensor(hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keep the first name of each tensor stored under several (a tied embedding is also the LM
    head): safetensors refuses shared tensors, and transformers re-ties the others on load."""
    seen, kept = set(), {}
    for name, tensor in hf_state.items():
        key = (tensor.data_ptr(), tensor.shape, tensor.stride())
        if key not in seen:
            seen.add(key)
            kept[name] = tensor
    return kept
