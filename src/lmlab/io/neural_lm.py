"""Model directories of the window and recurrent LMs: config.json (the config's fields, with
"model_type" "window" or "rnn"), model.safetensors and tokenizer.json. `lmlab.load` reads them
through `STATEFUL_LOADERS`."""

import dataclasses
import json
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.models.rnn import RNNConfig, RNNLM
from lmlab.models.window import WindowConfig, WindowLM

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
    fields = {f.name for f in dataclasses.fields(config_cls)}
    saved = json.loads((directory / "config.json").read_text())
    try:
        config = config_cls(**{k: v for k, v in saved.items() if k in fields})
    except TypeError as e:
        raise LmlabError(f"{directory}/config.json is not a {saved.get('model_type')} config ({e}); re-export "
                         "the model with lmlab train") from None
    model = model_cls(config)
    try:
        load_model(model, str(directory / WEIGHTS_FILE))
    except (SafetensorError, OSError, RuntimeError) as e:
        raise LmlabError(f"cannot read weights {directory / WEIGHTS_FILE}: {str(e).splitlines()[0]}; "
                         "the file is missing, corrupt or of another model") from None
    return model.eval()
