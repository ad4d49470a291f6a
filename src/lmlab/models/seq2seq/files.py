"""The directory of a trained encoder-decoder: `config.json` (model settings, both character
vocabularies, the task it was trained on) + `model.safetensors`.

`lmlab seq2seq translate / eval --model DIR` read it back; DIR may also be the run directory
holding it as `model/`.
"""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from safetensors.torch import save_file

from lmlab.data.char_vocab import CharVocab
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.config_file import config_from
from lmlab.io.hf import read_config_json, read_safetensors, safetensors_files
from lmlab.io.weight_checks import check_finite, check_fits, safetensors_header
from lmlab.models.seq2seq import Seq2Seq, Seq2SeqConfig, build_seq2seq
from lmlab.modules.meta import on_meta

MODEL_TYPE = "seq2seq-rnn"


@dataclass(frozen=True)
class Seq2SeqModel:
    """A trained encoder-decoder with what it needs to read and write text."""

    model: Seq2Seq
    src_vocab: CharVocab
    tgt_vocab: CharVocab
    max_len: int  # outputs are cut after this many characters (twice the longest training target)
    task: dict  # how its data was generated: name, seed, split sizes (for `lmlab seq2seq eval`)


def save_seq2seq_dir(trained: Seq2SeqModel, directory: str | Path) -> Path:
    """Write `trained` as a model directory, atomically."""
    config = {"model_type": MODEL_TYPE, "lmlab": dataclasses.asdict(trained.model.config),
              "src_chars": list(trained.src_vocab.chars), "tgt_chars": list(trained.tgt_vocab.chars),
              "max_len": trained.max_len, "task": trained.task}
    state = {k: v.detach().contiguous().cpu() for k, v in trained.model.state_dict().items()}
    directory = Path(directory)
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
    return directory


def load_seq2seq_dir(directory: str | Path) -> Seq2SeqModel:
    """Read a directory written by `save_seq2seq_dir` (or a run directory holding one as model/)."""
    path = Path(directory)
    if (path / "model" / "config.json").is_file():
        path = path / "model"
    config_file = path / "config.json"
    if not config_file.is_file():
        raise LmlabError(f"'{directory}' holds no trained seq2seq model (no config.json); pass the --out "
                         "directory of a finished `lmlab seq2seq train`")
    config = read_config_json(path, "pass the --out directory of a finished `lmlab seq2seq train`")
    if config.get("model_type") != MODEL_TYPE:
        raise LmlabError(f"'{path}' holds a {config.get('model_type')!r} model, not a {MODEL_TYPE} one; "
                         "pass a directory written by `lmlab seq2seq train`")
    model_config = config_from(str(config_file), lambda: Seq2SeqConfig(**config["lmlab"]), "train the model again")
    with on_meta():
        expected = build_seq2seq(model_config).state_dict()
    check_fits(expected, safetensors_header(safetensors_files(path)), str(path))
    model = build_seq2seq(model_config)
    state = read_safetensors(path)
    check_finite(state, str(path))
    model.load_state_dict(state)
    try:
        vocabs = CharVocab(tuple(config["src_chars"])), CharVocab(tuple(config["tgt_chars"]))
        max_len, task = int(config["max_len"]), dict(config["task"])
    except (KeyError, TypeError, ValueError) as e:
        raise LmlabError(f"{config_file} lacks or mistypes {e}; train the model again") from None
    return Seq2SeqModel(model.eval(), *vocabs, max_len, task)
