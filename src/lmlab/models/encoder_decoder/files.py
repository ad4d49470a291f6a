"""Encoder-decoder model directories in Hugging Face layout: `config.json` + `model.safetensors`
(+ `tokenizer.json`).

`save_encoder_decoder` writes tensors under HF's names and config.json under HF's fields, so
transformers loads the directory (BartForConditionalGeneration, MarianMTModel, …); config.json
also carries our full config under "lmlab", for choices HF's schema has no field for.
`load_encoder_decoder` reads such a directory back, or one written by transformers'
`save_pretrained`, through the converter module the registry gives for its `model_type`: each
offers config_from_hf, config_to_hf, from_hf and to_hf.
"""

from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.io.config_file import config_from
from lmlab.io.hf import check_lmlab_section, read_config_json, read_safetensors, safetensors_files, write_hf_dir
from lmlab.io.weight_checks import check_layer_bound, checked_state, safetensors_header
from lmlab.models import registry
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig, config_from_dict, config_to_dict
from lmlab.models.encoder_decoder.model import EncoderDecoder
from lmlab.models.family import LOAD, LOAD_ENCODER, Family
from lmlab.modules.meta import on_meta
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer
from lmlab.tokenizers.sentencepiece_dir import sentencepiece_dir_tokenizer
from lmlab.tokenizers.sentencepiece_file import model_file
from tokenizers import Tokenizer


def save_encoder_decoder(model: EncoderDecoder, tokenizer: Tokenizer | str | Path | None, out_dir: str | Path) -> Path:
    """Write `model` and `tokenizer` (an HF `tokenizers.Tokenizer` or the path of a tokenizer.json)
    as an HF model directory that `load_encoder_decoder` and transformers read, atomically."""
    cfg: EncoderDecoderConfig = model.config
    convert = registry.lookup(cfg.family, kind="encoder-decoder").convert
    dtype = str(model.lm_head.weight.dtype).removeprefix("torch.")
    hf_config = convert.config_to_hf(cfg) | {"torch_dtype": dtype, "lmlab": config_to_dict(cfg)}
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(Path(tokenizer))
    return write_hf_dir(out_dir, hf_config, _one_name_per_tensor(convert.to_hf(model.state_dict(), cfg)), tokenizer)


def load_encoder_decoder(model_dir: str | Path, dtype: torch.dtype = torch.float32
                         ) -> tuple[EncoderDecoder, Tokenizer | None]:
    """(model, tokenizer) from an encoder-decoder directory written by `save_encoder_decoder` or by
    transformers (config.json + *.safetensors), or from a run directory holding one as model/.
    The tokenizer is the directory's tokenizer.json, else its SentencePiece model (T5's spiece.model, with
    the sentinels transformers adds), None when it has neither."""
    path = Path(model_dir)
    if (path / "model" / "config.json").is_file():
        path = path / "model"
    hf = _read_config(path)
    convert = _encoder_decoder_family(path, hf).convert
    source = str(path / "config.json")
    if "lmlab" in hf:
        cfg = config_from(source, lambda: _section_config(hf, convert))
    else:
        cfg = config_from(source, lambda: convert.config_from_hf(hf), "re-save the model with transformers")
    header = safetensors_header(safetensors_files(path))
    check_layer_bound({"encoder layers": cfg.n_encoder_layers, "decoder layers": cfg.n_decoder_layers}, header,
                      str(path))
    with on_meta():
        model = build_encoder_decoder(cfg)
    state, _ = checked_state(model, lambda hf_state: convert.from_hf(hf_state, cfg), header,
                             lambda: read_safetensors(path), str(path))
    model.load_state_dict(state, assign=True)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.shared.weight
    return model.to(dtype).eval(), _tokenizer(path)


def _tokenizer(path: Path) -> Tokenizer | None:
    """The directory's tokenizer.json, else its SentencePiece model with the tokens transformers adds
    (`sentencepiece_dir.py`), else None."""
    if (path / TOKENIZER_FILE).is_file():
        return load_tokenizer(path / TOKENIZER_FILE)
    sentencepiece = model_file(path)
    return sentencepiece_dir_tokenizer(path, sentencepiece)[0] if sentencepiece is not None else None


def _section_config(hf: dict, convert) -> EncoderDecoderConfig:
    """config.json's "lmlab" section as our config, once its HF keys are checked to agree with it."""
    cfg = config_from_dict(hf["lmlab"])
    check_lmlab_section(hf, convert.config_to_hf(cfg))
    return cfg


def _read_config(path: Path) -> dict:
    if not path.is_dir():
        raise LmlabError(f"encoder-decoder model directory '{path}' not found; pass a directory written by "
                         "save_encoder_decoder or transformers' save_pretrained (config.json + model.safetensors)")
    return read_config_json(path, "pass a directory written by save_encoder_decoder or transformers' save_pretrained")


def _encoder_decoder_family(path: Path, hf: dict) -> Family:
    """The registry's record of the directory's model_type, or one clear line saying why it is not an
    encoder-decoder lmlab reads."""
    model_type = hf.get("model_type")
    family = registry.lookup(model_type if isinstance(model_type, str) else repr(model_type), str(path))
    readable = ", ".join(registry.model_types("encoder-decoder"))
    if family.kind == "encoder-decoder":
        return family
    roles = {LOAD: "a decoder-only model", LOAD_ENCODER: "an encoder-only model"}
    if family.reader in roles:
        raise LmlabError(f"'{path}' holds a {family.model_type} model, which is {roles[family.reader]}; this "
                         f"needs an encoder-decoder ({readable})")
    raise LmlabError(f"'{path}' holds a {family.title}, which lmlab does not read as an encoder-decoder; it reads: "
                     f"{readable} (read this one with {family.reader})")


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
