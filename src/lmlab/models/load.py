"""`lmlab.load`: a model and its tokenizer from wherever they are; `load_encoder` for BERT encoders.
Which reader a model directory needs is its config.json's `model_type`, looked up in the registry."""

from pathlib import Path

import torch
from tokenizers import Tokenizer

from lmlab.errors import LmlabError
from lmlab.io import zoo
from lmlab.models.llama.gguf_file import load_gguf
from lmlab.models.decoder_files import load_hf_dir
from lmlab.models.encoder_files import load_hf_encoder_dir
from lmlab.io.json_file import read_json_object
from lmlab.models.bert.model import BertEncoder
from lmlab.models import registry
from lmlab.models.family import LOAD, Family
from lmlab.models.stateful import StatefulLM
from lmlab.modules.transformer import TransformerDecoder
from lmlab.tokenizers.bpe import TOKENIZER_FILE
from lmlab.tokenizers.text import TextTokenizer
from lmlab.tokenizers.wordpiece import load_wordpiece


def load(name_or_path: str | Path, dtype: torch.dtype = torch.float32
         ) -> tuple[TransformerDecoder | StatefulLM, TextTokenizer]:
    """(model, tokenizer) from a zoo name, a .gguf file, an HF-layout model directory, an lmlab run
    directory (its model/), or the directory of an n-gram, window or RNN model (`lmlab train --arch`).
    A zoo model must be downloaded first (`lmlab download NAME`)."""
    path = zoo_or_path(name_or_path)
    if path.is_file():
        if path.suffix != ".gguf":
            raise LmlabError(f"'{path}' is a file but not a .gguf model; pass a .gguf file or a model directory")
        return load_gguf(path, dtype)
    if (path / "model" / "config.json").is_file():
        path = path / "model"
    if not path.exists():
        raise LmlabError(f"model '{name_or_path}' not found; pass a .gguf file, a model directory (config.json + "
                         f"model.safetensors), an lmlab run directory, or a zoo name: {', '.join(zoo.ZOO)}")
    if not (path / "config.json").is_file():
        raise LmlabError(f"'{name_or_path}' holds no finished model (no config.json); if it is a run that was "
                         "stopped, finish it with `lmlab train … --resume`")
    family = _family(path)
    if not (path / TOKENIZER_FILE).is_file():
        raise LmlabError(f"'{path}' has no {TOKENIZER_FILE}; put the model's tokenizer next to its weights")
    model = family.read(path) if family and family.read else load_hf_dir(path, dtype)
    tokenizer = TextTokenizer.from_dir(path)
    _check_tokenizer_fits(tokenizer.vocab_size, model.config.vocab_size, path)
    return model, tokenizer


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
        then = (" and generate with lmlab.generation.encoder_decoder.generate_seq2seq, or fine-tune it with "
                "`lmlab finetune --task seq2seq`") if family.kind == "encoder-decoder" else ""
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
