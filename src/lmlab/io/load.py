"""`lmlab.load`: a model and its tokenizer from wherever they are."""

import json
from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.io import zoo
from lmlab.io.gguf import load_gguf
from lmlab.io.hf import load_hf_dir
from lmlab.modules.transformer import TransformerDecoder
from lmlab.tokenizers.bpe import TOKENIZER_FILE
from lmlab.tokenizers.text import TextTokenizer


def load(name_or_path: str | Path, dtype: torch.dtype = torch.float32) -> tuple[TransformerDecoder, TextTokenizer]:
    """(model, tokenizer) from a zoo name, a .gguf file, an HF-layout model directory or an lmlab run
    directory (its model/). A zoo model must be downloaded first (`lmlab download NAME`)."""
    path = Path(name_or_path)
    if not path.exists() and str(name_or_path) in zoo.ZOO:
        path = zoo.model_path(str(name_or_path))
        if path is None:
            raise LmlabError(f"zoo model '{name_or_path}' is not downloaded yet; run `lmlab download {name_or_path}`")
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
    _refuse_encoders(path)
    if not (path / TOKENIZER_FILE).is_file():
        raise LmlabError(f"'{path}' has no {TOKENIZER_FILE}; put the model's tokenizer next to its weights")
    return load_hf_dir(path, dtype), TextTokenizer.from_dir(path)


def _refuse_encoders(path: Path) -> None:
    """Encoder-only models (BERT) have no LM head to generate with; say so before anything fails."""
    try:
        model_type = json.loads((path / "config.json").read_text()).get("model_type")
    except (json.JSONDecodeError, AttributeError):
        return  # read_hf_config reports a broken config.json
    if model_type == "bert":
        raise LmlabError(f"'{path}' holds a BERT encoder; the BERT family is not supported by lmlab.load yet "
                         "(it loads gpt2 and llama decoders)")
