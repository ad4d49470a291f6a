"""The Hugging Face model directory as a format: `config.json` + `*.safetensors` (+ `tokenizer.json`).

Every family's reader and writer (decoders in `models/decoder_files.py`, encoders, encoder-decoders, the
classic LMs) reads and writes its directory through these: the config as a JSON object, the weights by
HF name, the whole directory written atomically.
"""

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.json_file import read_json_object
from lmlab.tokenizers.text import TextTokenizer


def write_hf_dir(directory: str | Path, hf_config: dict, hf_state: dict[str, torch.Tensor],
                 tokenizer: Tokenizer | TextTokenizer | None = None) -> Path:
    """Write `config.json`, `model.safetensors` (tensors by HF name) and, when given, the tokenizer
    (`tokenizer.json`, and `tokenizer_config.json` for a `TextTokenizer`) as one directory, atomically:
    every model family's writer."""
    state = {k: v.detach().contiguous().cpu() for k, v in hf_state.items()}
    directory = Path(directory)
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2))
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        if isinstance(tokenizer, TextTokenizer):
            tokenizer.save(tmp)
        elif tokenizer is not None:
            tokenizer.save(str(tmp / "tokenizer.json"))
    return directory


def read_config_json(directory: str | Path, fix: str) -> dict:
    """The JSON object in `directory`/config.json; `fix` ends the one-line error when it is missing."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise LmlabError(f"'{directory}' has no config.json; {fix}")
    return read_json_object(path, "re-export the model")


def safetensors_files(directory: Path) -> list[Path]:
    """The directory's *.safetensors files, in name order; none is an LmlabError."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise LmlabError(f"'{directory}' has no *.safetensors weights; export the model with safetensors")
    return files


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the directory's *.safetensors files, by its HF name."""
    hf_state = {}
    for f in safetensors_files(directory):
        try:
            hf_state.update(load_file(f))
        except (SafetensorError, OSError) as e:
            raise LmlabError(f"cannot read weights {f}: {e}; the file is corrupt or truncated, re-export it") from None
    return hf_state
