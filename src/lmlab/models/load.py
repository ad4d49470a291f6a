"""`lmlab.load`: a model and its tokenizer from wherever they are; `load_encoder` for BERT encoders."""

from collections.abc import Callable
from pathlib import Path

import torch
from tokenizers import Tokenizer

from lmlab.errors import LmlabError
from lmlab.io import zoo
from lmlab.models.encoder_decoder.files import CONVERTERS
from lmlab.models.llama.gguf_file import load_gguf
from lmlab.models.decoder_files import load_hf_dir
from lmlab.models.encoder_files import load_hf_encoder_dir
from lmlab.io.json_file import read_json_object
from lmlab.models.neural_lm_files import load_rnn_dir, load_window_dir
from lmlab.models.ngram.files import load_ngram_dir
from lmlab.models.bert.model import BertEncoder
from lmlab.models.encoders import ENCODER_FAMILIES
from lmlab.models.stateful import StatefulLM
from lmlab.modules.transformer import TransformerDecoder
from lmlab.tokenizers.bpe import TOKENIZER_FILE
from lmlab.tokenizers.text import TextTokenizer
from lmlab.tokenizers.wordpiece import load_wordpiece

# The pre-transformer families: config.json's "model_type" -> a reader of such a model directory.
STATEFUL_LOADERS: dict[str, Callable[[Path], StatefulLM]] = {
    "ngram": load_ngram_dir,
    "window": load_window_dir,
    "rnn": load_rnn_dir,
}


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
    model_type = _model_type(path)
    _refuse_encoders(path, model_type)
    _refuse_other_tools(path, model_type)
    _refuse_encoder_decoders(path, model_type)
    if not (path / TOKENIZER_FILE).is_file():
        raise LmlabError(f"'{path}' has no {TOKENIZER_FILE}; put the model's tokenizer next to its weights")
    if model_type in STATEFUL_LOADERS:
        model = STATEFUL_LOADERS[model_type](path)
    else:
        model = load_hf_dir(path, dtype)
    tokenizer = TextTokenizer.from_dir(path)
    _check_tokenizer_fits(tokenizer.vocab_size, model.config.vocab_size, path)
    return model, tokenizer


def _model_type(path: Path) -> str | None:
    try:
        model_type = read_json_object(path / "config.json", "").get("model_type")
    except LmlabError:
        return None  # read_hf_config reports a broken config.json
    return model_type if isinstance(model_type, str) else None


def _check_tokenizer_fits(tokens: int, vocab_size: int, source: Path) -> None:
    """Refuse a tokenizer of `tokens` tokens that gives ids the model (of `vocab_size` rows) has no row for."""
    if tokens > vocab_size:
        raise LmlabError(f"{source}: the tokenizer has {tokens} tokens but the model's vocabulary only {vocab_size}; "
                         "put the model's own tokenizer next to its weights")


def _refuse_encoders(path: Path, model_type: str | None) -> None:
    """Encoder-only models (BERT, RoBERTa, …) have no LM head to generate with; say so before anything fails."""
    if model_type in ENCODER_FAMILIES:
        name = model_type.upper()
        raise LmlabError(f"'{path}' holds a {name} encoder; {name} is not supported by lmlab.load, which loads gpt2 "
                         "and llama decoders: use lmlab.models.load.load_encoder")


# Models that lmlab trains but that are not next-token generators: model_type -> the command that uses them.
OTHER_TOOLS: dict[str, str] = {
    "seq2seq-rnn": "lmlab seq2seq translate --model DIR --text …",
    "elmo": "lmlab elmo embed --model DIR --text …",
    "word2vec": "lmlab word2vec neighbors --model DIR --word …",
}


def _refuse_other_tools(path: Path, model_type: str | None) -> None:
    """A seq2seq, ELMo or word2vec directory has its own command; name it instead of failing on the weights."""
    if model_type in OTHER_TOOLS:
        raise LmlabError(f"'{path}' holds a {model_type} model, which lmlab.load (and lmlab generate, eval "
                         f"perplexity) does not read; use `{OTHER_TOOLS[model_type]}`")


def _refuse_encoder_decoders(path: Path, model_type: str | None) -> None:
    """Encoder-decoders (BART, Marian, T5) need a source to encode; they load with their own reader."""
    if model_type in CONVERTERS:
        raise LmlabError(f"'{path}' holds a {model_type} encoder-decoder, which lmlab.load (decoder-only models) "
                         "does not read: load it with lmlab.models.encoder_decoder.files.load_encoder_decoder and generate with "
                         "lmlab.generation.encoder_decoder.generate_seq2seq, or fine-tune it with "
                         "`lmlab finetune --task seq2seq`")


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
