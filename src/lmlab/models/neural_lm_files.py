"""Model directories of the window and recurrent LMs: config.json (the config's fields, with
"model_type" "window" or "rnn"), model.safetensors and tokenizer.json. `lmlab.load` reads them
through the registry (`models/window/family.py`, `models/rnn/family.py`)."""

import dataclasses
import json
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.config_file import config_from
from lmlab.io.hf import read_config_json, safetensors_files
from lmlab.io.weight_checks import check_finite, check_fits, safetensors_header
from lmlab.models.rnn import RNNLM, RNNConfig
from lmlab.models.window import WindowConfig, WindowLM
from lmlab.modules.meta import on_meta

WEIGHTS_FILE = "model.safetensors"


def save_neural_lm_dir(model: WindowLM | RNNLM, directory: str | Path, tokenizer=None) -> Path:
    """Write `model` (and `tokenizer`, an HF `tokenizers.Tokenizer`) as a model directory, atomically.
    Tied weights are stored once."""
    directory = Path(directory)
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(dataclasses.asdict(model.config), indent=2))
        save_model(model, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save(str(tmp / "tokenizer.json"))
    return directory


def load_window_dir(directory: Path) -> WindowLM:
    """The window LM saved in `directory`, in eval mode."""
    return _load(directory, WindowConfig, WindowLM)


def load_rnn_dir(directory: Path) -> RNNLM:
    """The RNN / LSTM / GRU LM saved in `directory`, in eval mode."""
    return _load(directory, RNNConfig, RNNLM)


def _load(directory: Path, config_cls, model_cls):
    """The model of `config_cls` in `directory`, checked like every model file: config keys typed and in
    range, the weights' shapes against a meta-device build before the real one, no NaN weights."""
    fields = {f.name for f in dataclasses.fields(config_cls)}
    saved = read_config_json(directory, "pass the --out directory of `lmlab train --arch`")
    config = config_from(str(directory / "config.json"),
                         lambda: config_cls(**{k: v for k, v in saved.items() if k in fields}),
                         "re-export the model with lmlab train")
    header = safetensors_header(safetensors_files(directory))
    with on_meta():
        meta = model_cls(config)
    names_of: dict[int, list[str]] = {}  # a tied weight is stored under one of its names
    for name, param in meta.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(param), []).append(name)
    tied = {name for names in names_of.values() if len(names) > 1 for name in names}
    check_fits({n: t for n, t in meta.state_dict().items() if n in header or n not in tied}, header, str(directory))
    model = model_cls(config)
    try:
        load_model(model, str(directory / WEIGHTS_FILE))
    except (SafetensorError, OSError, RuntimeError) as e:
        raise LmlabError(f"cannot read weights {directory / WEIGHTS_FILE}: {str(e).splitlines()[0]}; "
                         "the file is missing, corrupt or of another model") from None
    check_finite(model.state_dict(), str(directory))
    return model.eval()
