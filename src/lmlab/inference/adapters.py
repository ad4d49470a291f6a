"""LoRA adapters served beside their base model: `lmlab serve --adapter NAME=DIR`, without a copy of the base.

    rows = attach_adapters(model, [("math", "runs/math/adapter"), ("chat", "runs/chat")])
    engine = Engine(model, tokenizer, adapters=rows)     # a request picks one: engine.submit(..., adapter=0)

Each adapter is read by `models.peft_files.load_peft` (lmlab's files or PEFT's, checked against the
base's fingerprint) onto a shell of the model: a copy of its module tree whose parameters and buffers
ARE the model's, so nothing of the base is copied. Its LoRA layers' A, B and scale are then added to
one `MultiLoRALinear` per adapted layer of the model itself (modules/peft/multi_lora.py), and the shell
is dropped. Only LoRA's A and B can be applied per row; an adapter that trains anything else (prefix or
prompt tuning, bottleneck adapters, biases, whole modules) is refused.
"""

import copy
import os
from pathlib import Path

from torch import nn

from lmlab.errors import LmlabError
from lmlab.models.peft_files import load_peft
from lmlab.modules.peft.core import peft_parameters
from lmlab.modules.peft.lora import LoRALinear
from lmlab.modules.peft.multi_lora import AdapterRows, MultiLoRALinear
from lmlab.modules.quantized import QuantizedLinear


def attach_adapters(model: nn.Module, adapters: list[tuple[str, str | os.PathLike]]) -> AdapterRows:
    """Add the LoRA adapters `adapters` ((name, directory), adapter k the k-th) to `model` in place; the
    `AdapterRows` that picks each row's adapter. A directory is an adapter's, or a run directory
    holding one in adapter/."""
    if any(isinstance(m, QuantizedLinear) for m in model.modules()):
        raise LmlabError("--adapter applies LoRA to float weights and this model is quantized (int8/int4); load it "
                         "as fp32 or bf16 (--dtype), or serve a merged model alone")
    loaded = [_lora_layers(model, name, Path(directory)) for name, directory in adapters]
    rows = AdapterRows(len(loaded))
    for k, layers in enumerate(loaded):
        for layer_name, lora in layers:
            layer = model.get_submodule(layer_name)
            if not isinstance(layer, MultiLoRALinear):
                layer = MultiLoRALinear(layer, rows)
                model.set_submodule(layer_name, layer)
            layer.add(k, lora.lora_a, lora.lora_b, lora.scale)
    return rows


def _lora_layers(model: nn.Module, name: str, directory: Path) -> list[tuple[str, LoRALinear]]:
    """The LoRA layers, by the dotted name of the linear layer each adapts, of the adapter in
    `directory` loaded onto a shell of `model` that shares its tensors."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    shell = copy.deepcopy(model, memo=shared)
    load_peft(shell, directory)
    layers = [(n, m) for n, m in shell.named_modules() if isinstance(m, LoRALinear)]
    lora = {f"{n}.{p}" for n, _ in layers for p in LoRALinear.adds}
    others = sorted(set(peft_parameters(shell)) - lora)
    if others or not layers:
        what = f"trains {others[0]}" if others else "has no LoRA layer"
        raise LmlabError(f"--adapter {name}: the adapter in {directory} {what}; only LoRA adapters share one base "
                         "per row: serve it alone with --model RUN_DIR")
    return layers
