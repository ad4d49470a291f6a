"""An ELMo model directory: model.safetensors (the weights), config.json (ElmoConfig and
model_type "elmo") and vocab.txt (the softmax's words, "word count" per line, <unk> first)."""

import dataclasses
import json
from pathlib import Path

from safetensors.torch import load_file, save_file

from lmlab.data.words import WordVocab, parse_vocab_text, save_vocab_text
from lmlab.errors import LmlabError
from lmlab.models.elmo.config import ElmoConfig
from lmlab.models.elmo.model import ElmoLM

WEIGHTS_FILE, CONFIG_FILE, VOCAB_FILE = "model.safetensors", "config.json", "vocab.txt"
MODEL_TYPE = "elmo"


def save_elmo(model: ElmoLM, vocab: WordVocab, directory: Path) -> None:
    """Write the three files into `directory` (which the caller renames into place)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(directory / WEIGHTS_FILE))
    config = {"model_type": MODEL_TYPE, **dataclasses.asdict(model.cfg)}
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    (directory / VOCAB_FILE).write_text(save_vocab_text(vocab), encoding="utf-8")


def load_elmo(directory: str | Path) -> tuple[ElmoLM, WordVocab]:
    """The model (in eval mode) and its vocabulary from a directory written by `lmlab elmo train`."""
    directory = Path(directory)
    try:
        config = json.loads((directory / CONFIG_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        config = None
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        raise LmlabError(f"'{directory}' is not an ELMo model directory (no {CONFIG_FILE} with model_type "
                         f"'{MODEL_TYPE}'); pass the model directory that `lmlab elmo train` wrote")
    names = {f.name for f in dataclasses.fields(ElmoConfig)}
    model = ElmoLM(ElmoConfig(**{k: v for k, v in config.items() if k in names}))
    try:
        model.load_state_dict(load_file(str(directory / WEIGHTS_FILE)))
        vocab = parse_vocab_text((directory / VOCAB_FILE).read_text(encoding="utf-8"), str(directory / VOCAB_FILE))
    except (OSError, RuntimeError) as e:
        raise LmlabError(f"'{directory}' has a missing or damaged {WEIGHTS_FILE} or {VOCAB_FILE} "
                         f"({type(e).__name__}); train the model again") from None
    return model.eval(), vocab
