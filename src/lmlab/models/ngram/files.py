"""An n-gram model directory: `config.json` (model_type "ngram"), `ngram.npz` (the backoff tables)
and the tokenizer, written atomically as one directory and read back by `lmlab.load`."""

import json
import os
from pathlib import Path

import numpy as np

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.config_file import config_from
from lmlab.io.hf import read_config_json
from lmlab.models.ngram.model import NGramConfig, NGramLM
from lmlab.models.ngram.tables import BackoffTables
from lmlab.tokenizers.bpe import save_tokenizer
from lmlab.tokenizers.text import TextTokenizer
from tokenizers import Tokenizer

TABLES_FILE = "ngram.npz"


def save_ngram_dir(model: NGramLM, tokenizer: Tokenizer | TextTokenizer, directory: str | os.PathLike) -> Path:
    """Write `model` and `tokenizer` (a plain `tokenizers.Tokenizer`, or a `TextTokenizer` with its special
    tokens) to `directory`, replacing it in one rename."""
    tables = model.tables
    arrays = {}
    for k in range(1, tables.order + 1):
        if k > 1:
            arrays[f"keys_{k}"] = tables.keys[k - 1]
        arrays[f"log_probs_{k}"] = tables.log_probs[k - 1]
        if k < tables.order:
            arrays[f"log_backoffs_{k}"] = tables.log_backoffs[k - 1]
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2))
        with open(tmp / TABLES_FILE, "wb") as file:
            np.savez(file, **arrays)
        if isinstance(tokenizer, TextTokenizer):
            tokenizer.save(tmp)
        else:
            save_tokenizer(tokenizer, tmp)
    return Path(directory)


def load_ngram_dir(directory: str | os.PathLike) -> NGramLM:
    """The `NGramLM` saved in `directory` by `save_ngram_dir`."""
    directory = Path(directory)
    path = directory / TABLES_FILE
    if not path.is_file():
        raise LmlabError(f"'{directory}' has no {TABLES_FILE}; it is not a complete n-gram model directory")
    saved = read_config_json(directory, "pass the --out directory of `lmlab ngram train`")
    config = config_from(str(directory / "config.json"), lambda: NGramConfig.from_dict(saved),
                         "train the model again")
    with np.load(path) as arrays:
        order, vocab = config.order, config.vocab_size
        try:
            keys = [np.arange(vocab, dtype=np.int64)] + [arrays[f"keys_{k}"] for k in range(2, order + 1)]
            log_probs = [arrays[f"log_probs_{k}"] for k in range(1, order + 1)]
            log_backoffs = [arrays[f"log_backoffs_{k}"] for k in range(1, order)]
        except KeyError as error:
            raise LmlabError(f"'{path}' lacks array {error}; the file does not match config.json "
                             f"(order {order})") from error
    if len(log_probs[0]) != vocab:
        raise LmlabError(f"'{path}' holds {len(log_probs[0])} unigrams but config.json says vocab_size {vocab}")
    return NGramLM(config, BackoffTables(order, vocab, tuple(keys), tuple(log_probs), tuple(log_backoffs)))
