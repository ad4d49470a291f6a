"""`lmlab.load`: a model and its tokenizer from wherever they are."""

from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.io.hf import load_hf_dir
from lmlab.modules.transformer import TransformerDecoder
from lmlab.tokenizers.bpe import TOKENIZER_FILE
from lmlab.tokenizers.text import TextTokenizer


def load(name_or_path: str | Path, dtype: torch.dtype = torch.float32) -> tuple[TransformerDecoder, TextTokenizer]:
    """(model, tokenizer) from an HF-layout model directory or an lmlab run directory (its model/)."""
    path = Path(name_or_path)
    if (path / "model" / "config.json").is_file():
        path = path / "model"
    if not path.exists():
        raise LmlabError(f"model '{name_or_path}' not found; pass a model directory (config.json + "
                         "model.safetensors) or an lmlab run directory")
    if not (path / "config.json").is_file():
        raise LmlabError(f"'{name_or_path}' holds no finished model (no config.json); if it is a run that was "
                         "stopped, finish it with `lmlab train … --resume`")
    if not (path / TOKENIZER_FILE).is_file():
        raise LmlabError(f"'{path}' has no {TOKENIZER_FILE}; put the model's tokenizer next to its weights")
    return load_hf_dir(path, dtype), TextTokenizer.from_dir(path)
