"""The files of a fine-tuned encoder (`lmlab finetune --task classify|pair|regress|tag|qa|choice`),
written and read back:

    out/model/config.json, model.safetensors, tokenizer.json   the encoder in HF layout (`models.encoder_files`)
    out/model/head.safetensors                                  the task head's own weights ("classifier.weight", …)
    out/model/task.json                                         task, labels, lengths, head class, best scores

The head's tensor names are its state dict's, the names the heads have always had, so runs saved
by earlier versions load unchanged. What is read is checked (task.json's fields, the head's tensor
names and shapes) and refused in one line.
"""

import json
import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from lmlab.errors import LmlabError
from lmlab.heads.task_model import EncoderWithHead
from lmlab.io.atomic import atomic_path
from lmlab.io.json_file import read_json_object
from lmlab.models.encoder_files import save_hf_encoder_dir
from lmlab.models.finetuned_encoder import TASK_HEADS, FinetunedEncoder, task_head
from lmlab.models.head_files import read_head_state
from lmlab.models.load import load_encoder

HEAD_FILE = "head.safetensors"
TASK_FILE = "task.json"
FIX = "pass the --out of a finished `lmlab finetune` run, or run it again"
LABELLED = ("classify", "pair", "tag")  # the tasks whose head has one output per label


def save_finetuned(tuned: FinetunedEncoder, directory: str | os.PathLike, scores: dict) -> Path:
    """Write the encoder (HF layout, with its tokenizer), the head's own weights and task.json (with the
    evaluation `scores` of this model) into `directory`, atomically."""
    head_state = {k: v.detach().cpu().contiguous() for k, v in tuned.model.head.state_dict().items()}
    info = {"task": tuned.task, "labels": tuned.labels, "max_length": tuned.max_length,
            "max_answer_length": tuned.max_answer_length, "head": type(tuned.model.head).__name__, "scores": scores}
    directory = Path(directory)
    with atomic_path(directory) as tmp:
        save_hf_encoder_dir(tuned.model.encoder, tmp, tuned.tokenizer)
        save_file(head_state, tmp / HEAD_FILE)
        (tmp / TASK_FILE).write_text(json.dumps(info, indent=2))
    return directory


def is_finetuned(path: str | os.PathLike) -> bool:
    """Whether `path` (a run directory or its model/) holds a fine-tuned encoder."""
    return (Path(path) / TASK_FILE).is_file() or (Path(path) / "model" / TASK_FILE).is_file()


def load_finetuned(path: str | os.PathLike, device: str | torch.device = "cpu") -> FinetunedEncoder:
    """The fine-tuned encoder saved by `lmlab finetune` in `path` (the run's --out, or its model/), in eval
    mode on `device` (a torch device: cpu, cuda, cuda:1)."""
    path = Path(path)
    if (path / "model" / TASK_FILE).is_file():
        path = path / "model"
    if not (path / TASK_FILE).is_file():
        raise LmlabError(f"'{path}' holds no fine-tuned encoder ({TASK_FILE} is missing); {FIX}")
    info = read_task_info(path / TASK_FILE)
    encoder, tokenizer = load_encoder(path)
    if info["max_length"] > encoder.config.context_length:
        raise LmlabError(f"{path / TASK_FILE}: max_length {info['max_length']} exceeds the encoder's "
                         f"{encoder.config.context_length} positions; {FIX}")
    head = task_head(info["task"], encoder.config.d_model, len(info["labels"]))
    if info.get("head", type(head).__name__) != type(head).__name__:
        raise LmlabError(f"{path / TASK_FILE}: head {info['head']!r} is not the {type(head).__name__} of task "
                         f"'{info['task']}'; {FIX}")
    head.load_state_dict(read_head_state(path / HEAD_FILE, head.state_dict(), FIX))
    return FinetunedEncoder(EncoderWithHead(encoder, head).to(device).eval(), tokenizer, info["task"],
                            info["labels"], info["max_length"], info["max_answer_length"])


def read_task_info(path: Path) -> dict:
    """task.json, its fields checked: task, labels (one name per output of a labelled task), lengths."""
    info = read_json_object(path, FIX)
    task = info.get("task")
    if task not in TASK_HEADS:
        raise LmlabError(f"{path}: task {task!r} is not one of {', '.join(TASK_HEADS)}; {FIX}")
    labels = info.get("labels")
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise LmlabError(f"{path}: labels must be a list of names, not {labels!r:.60}; {FIX}")
    if task in LABELLED and not labels:
        raise LmlabError(f"{path}: a '{task}' model needs its label names and labels is empty; {FIX}")
    for name in ("max_length", "max_answer_length"):
        value = info.get(name)
        if type(value) is not int or value < 1:
            raise LmlabError(f"{path}: {name} must be a whole number of tokens of at least 1, not {value!r:.40}; "
                             f"{FIX}")
    return info
