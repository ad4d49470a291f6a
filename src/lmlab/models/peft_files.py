"""Adapter files: what PEFT trained, saved apart from the base model and loaded back onto it.

LoRA (and prompt and prefix tuning on a RoPE decoder) is written in Hugging Face peft's layout, which
`peft.PeftModel.from_pretrained(hf_model, directory)` loads:

    adapter_config.json          peft's settings (peft_type, r, lora_alpha, target_modules, …)
    adapter_model.safetensors    its tensors under peft's names (`models/peft_lora.py`, `peft_prompt.py`)
    lmlab_adapter.json           lmlab's own: the method, its settings and the base model's fingerprint

Methods peft has no exact form of (bottleneck adapters; prompt and prefix tuning with learned positions) keep
lmlab's own files:
`peft.safetensors` with the added parameters and `peft.json` naming the method, its settings and the
fingerprint. `load_peft` reads both layouts, and an adapter peft wrote (no fingerprint: it is checked
by its tensors' names and shapes). A fingerprint must match the base: an adapter is only meaningful on
the weights it was trained on.
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
from lmlab.io.json_file import read_json_object
from lmlab.io.weight_checks import check_finite, safetensors_header
from lmlab.io.zoo import ZOO, HubSource
from lmlab.models.peft_lora import lora_from_peft, lora_to_peft
from lmlab.models.peft_prompt import (
    prefix_from_peft,
    prefix_problem,
    prefix_to_peft,
    prompt_from_peft,
    prompt_problem,
    prompt_to_peft,
)
from lmlab.modules.peft.core import peft_modules, peft_parameters
from lmlab.modules.peft.methods import apply_peft, peft_method

WEIGHTS_FILE, SETTINGS_FILE = "peft.safetensors", "peft.json"  # lmlab's own layout
# method -> (peft_type, why it has no exact peft form on a model (None: it has), writer, reader)
PEFT_FORMS = {"lora": ("LORA", lambda model: None, lora_to_peft, lora_from_peft),
              "prompt": ("PROMPT_TUNING", prompt_problem, prompt_to_peft, prompt_from_peft),
              "prefix": ("PREFIX_TUNING", prefix_problem, prefix_to_peft, prefix_from_peft)}
CONFIG_FILE, TENSORS_FILE, LMLAB_FILE = "adapter_config.json", "adapter_model.safetensors", "lmlab_adapter.json"
_FILES = {WEIGHTS_FILE, SETTINGS_FILE, CONFIG_FILE, TENSORS_FILE, LMLAB_FILE}


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


def peft_form_problem(model: nn.Module, method: str) -> str | None:
    """Why `method` on `model` has no exact form in Hugging Face peft's layout, or None when it has one."""
    if method not in PEFT_FORMS:
        return f"peft has no method that computes lmlab's '{method}' (bottleneck adapters are lmlab's own)"
    return PEFT_FORMS[method][1](model)


def save_peft(model: nn.Module, directory: str | os.PathLike, method: str, settings: dict,
              base_fingerprint: str, base_name: str | None = None, peft_format: bool | None = None) -> Path:
    """Write the PEFT parameters of `model` to `directory`, which is replaced as a whole (so it must hold
    nothing else): in peft's layout where the method has one (`peft_form_problem`), else lmlab's own;
    `peft_format` True refuses lmlab's own in one line, False asks for it. Both record the method, its
    settings and the fingerprint of the base; `base_name` (a path or hub name) goes to peft's config."""
    peft_method(method)
    directory = Path(directory)
    if directory.is_dir() and set(os.listdir(directory)) - _FILES - {".lmlab"}:
        raise LmlabError(f"{directory} holds other files that saving the adapter would delete; "
                         f"save it to a directory of its own, e.g. {directory / 'adapter'}")
    if not peft_parameters(model):
        raise LmlabError(f"the model has no PEFT parameters to save (method '{method}'); apply a PEFT method first")
    problem = peft_form_problem(model, method) if peft_format is not False else "lmlab's own layout was asked for"
    if problem and peft_format:
        raise LmlabError(f"cannot write the adapter in peft's format: {problem}; save it in lmlab's own format")
    record = {"method": method, "settings": settings, "base_model": base_fingerprint}
    if problem:
        tensors = {name: p.detach().cpu().contiguous() for name, p in peft_parameters(model).items()}
        files = {SETTINGS_FILE: record}
    else:
        config, tensors = PEFT_FORMS[method][2](model, hub_name(base_name))
        files = {CONFIG_FILE: config, LMLAB_FILE: record}
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        save_file(tensors, tmp / (WEIGHTS_FILE if problem else TENSORS_FILE))
        for name, content in files.items():
            (tmp / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    return directory


def hub_name(base_name: str | None) -> str | None:
    """What peft's config names as the base: a zoo model's Hugging Face repo (which transformers loads), or the
    name or path as given."""
    source = ZOO[base_name].source if base_name in ZOO else None
    return source.repo_id if isinstance(source, HubSource) else base_name


def load_peft(model: nn.Module, directory: str | os.PathLike) -> nn.Module:
    """Apply the adapter saved in `directory` (peft's layout, written by peft or lmlab, or lmlab's own; or a
    post-training run directory, whose adapter/ it is) to the base model `model` and load its parameters.
    Refuses a base model other than the one the adapter was trained on, and an adapter lmlab cannot compute
    exactly, in one line each."""
    directory = Path(directory)
    if (directory / "adapter").is_dir() and not any((directory / f).is_file() for f in (CONFIG_FILE, SETTINGS_FILE)):
        directory = directory / "adapter"  # a run directory
    if next(peft_modules(model), None) is not None:
        raise LmlabError(f"the model already has PEFT modules; load the adapter in {directory} onto a fresh base model")
    if (directory / CONFIG_FILE).is_file():
        return _load_peft_layout(model, directory)
    if not (directory / SETTINGS_FILE).is_file():
        raise LmlabError(f"{directory} holds no adapter (no {CONFIG_FILE} or {SETTINGS_FILE}); pass a directory "
                         "written by peft's save_pretrained or by lmlab")
    record = read_json_object(directory / SETTINGS_FILE, "pass a directory written by save_peft")
    if not isinstance(record.get("method"), str) or not isinstance(record.get("settings"), dict):
        raise LmlabError(f"{directory / SETTINGS_FILE} names no PEFT method and settings; pass a directory written "
                         "by save_peft")
    check_base(model, record, directory)
    saved = _read_tensors(directory / WEIGHTS_FILE, model)
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


def _load_peft_layout(model: nn.Module, directory: Path) -> nn.Module:
    """`load_peft` of peft's layout: adapter_config.json, adapter_model.safetensors, and lmlab's record if any."""
    fix = "pass a directory written by peft's save_pretrained or by lmlab"
    config = read_json_object(directory / CONFIG_FILE, fix)
    if (directory / LMLAB_FILE).is_file():
        check_base(model, read_json_object(directory / LMLAB_FILE, fix), directory)
    readers = {kind: read for kind, _, _, read in PEFT_FORMS.values()}
    kind = config.get("peft_type")
    if kind not in readers:
        raise LmlabError(f"adapter in {directory} is peft_type {kind!r}; lmlab reads peft's {', '.join(readers)} "
                         "adapters (its other methods have no lmlab counterpart)")
    if config.get("task_type") not in (None, "CAUSAL_LM"):
        raise LmlabError(f"adapter in {directory} is for task_type {config['task_type']!r}; lmlab loads CAUSAL_LM "
                         "adapters onto decoders")
    tensors = _read_tensors(directory / TENSORS_FILE, model)
    return readers[kind](model, config, tensors, str(directory))


def check_base(model: nn.Module, record: dict, directory: Path) -> None:
    """Refuse a base model whose fingerprint is not the one the adapter's record names."""
    trained_on, this = record.get("base_model"), base_fingerprint(model)
    if trained_on != this:
        raise LmlabError(f"adapter in {directory} was trained on base model {trained_on}, not {this}; "
                         f"load it onto {trained_on}")


def _read_tensors(path: Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors of an adapter file, its header read first: no more numbers than the base model has
    (an adapter is a fraction of it), and every one finite."""
    header = safetensors_header([path]) if path.is_file() else None
    if header is None:
        raise LmlabError(f"{path} does not exist; the adapter directory is incomplete, save it again")
    size, limit = sum(t.numel() for t in header.values()), sum(p.numel() for p in model.parameters())
    if size > limit:
        raise LmlabError(f"{path} holds {size:,} numbers, more than its base model's {limit:,}; it is no adapter of "
                         "this model")
    try:
        tensors = load_file(path)
    except (OSError, SafetensorError) as e:
        raise LmlabError(f"cannot read {path}: {e}; the file is corrupt or truncated, save it again") from None
    check_finite(tensors, str(path))
    return tensors
