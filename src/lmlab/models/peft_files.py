"""Adapter files: what PEFT trained, saved apart from the base model and loaded back onto it.

`save_peft` writes only the added parameters (a few MB, not the whole model) as safetensors,
plus a small JSON naming the method, its settings and a fingerprint of the base model.
`load_peft` re-applies the method to a base model and loads the parameters, refusing a base
model whose fingerprint differs: an adapter is only meaningful on the weights it was trained on.
"""

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from lmlab.config import config_to_dict
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.modules.peft.core import peft_modules, peft_parameters
from lmlab.modules.peft.methods import apply_peft, peft_method

WEIGHTS_FILE, SETTINGS_FILE = "peft.safetensors", "peft.json"


def base_fingerprint(model: nn.Module) -> str:
    """Names the base model's weights: its shape and a hash of its architecture (the config less
    dropout and context length, which a run may change), token embedding and norms.

    These are tensors no PEFT method changes (LoRA merges only into linear layers), so a model
    with adapters applied, merged or not, has its base's fingerprint. Hashed in bf16, so a bf16
    copy of the same weights matches. Looks like "llama-2x128-3f2a9c1b0d4e".
    """
    cfg = model.config
    shape = {k: v for k, v in config_to_dict(cfg).items() if k not in ("dropout", "context_length")}
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode())
    tensors = {"token_embedding.weight": model.token_embedding.weight}
    tensors |= {name: p for name, p in model.named_parameters()
                if any(part.startswith("norm") for part in name.split(".")[:-1])}
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].detach().to("cpu", torch.bfloat16).view(torch.int16).numpy().tobytes())
    return f"{cfg.family}-{cfg.n_layers}x{cfg.d_model}-{digest.hexdigest()[:12]}"


def save_peft(model: nn.Module, directory: str | os.PathLike, method: str, settings: dict,
              base_fingerprint: str) -> Path:
    """Write the PEFT parameters of `model` and what re-creates them (method, settings, base
    model fingerprint) to `directory`, which is replaced as a whole (so it must hold nothing else)."""
    peft_method(method)
    directory = Path(directory)
    if directory.is_dir() and set(os.listdir(directory)) - {WEIGHTS_FILE, SETTINGS_FILE}:
        raise LmlabError(f"{directory} holds other files that saving the adapter would delete; "
                         f"save it to a directory of its own, e.g. {directory / 'adapter'}")
    tensors = {name: p.detach().cpu().contiguous() for name, p in peft_parameters(model).items()}
    if not tensors:
        raise LmlabError(f"the model has no PEFT parameters to save (method '{method}'); apply a PEFT method first")
    record = {"method": method, "settings": settings, "base_model": base_fingerprint}
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        save_file(tensors, tmp / WEIGHTS_FILE)
        (tmp / SETTINGS_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return directory


def load_peft(model: nn.Module, directory: str | os.PathLike) -> nn.Module:
    """Apply the PEFT method saved in `directory` to the base model `model` and load its trained
    parameters. Refuses a base model other than the one the adapter was trained on."""
    directory = Path(directory)
    try:
        record = json.loads((directory / SETTINGS_FILE).read_text(encoding="utf-8"))
        saved = load_file(directory / WEIGHTS_FILE)
    except (OSError, ValueError, SafetensorError) as e:
        raise LmlabError(f"{directory} holds no readable adapter ({e}); pass a directory written by save_peft"
                         ) from None
    if next(peft_modules(model), None) is not None:
        raise LmlabError(f"the model already has PEFT modules; load the adapter in {directory} onto a fresh base model")
    trained_on, this = record["base_model"], base_fingerprint(model)
    if trained_on != this:
        raise LmlabError(f"adapter in {directory} was trained on base model {trained_on}, not {this}; "
                         f"load it onto {trained_on}")
    apply_peft(model, record["method"], **record["settings"])
    params = peft_parameters(model)
    if set(saved) != set(params):
        missing, unexpected = sorted(set(params) - set(saved)), sorted(set(saved) - set(params))
        raise LmlabError(f"adapter in {directory} does not fit: missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]}; it was saved by a different version of lmlab")
    with torch.no_grad():
        for name, p in params.items():
            if saved[name].shape != p.shape:
                raise LmlabError(f"adapter in {directory}: {name} has shape {tuple(saved[name].shape)}, "
                                 f"the model expects {tuple(p.shape)}")
            p.copy_(saved[name])
    return model
