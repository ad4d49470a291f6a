"""A LoRA adapter written as llama.cpp's GGUF LoRA file (`llama-cli --lora FILE`, llama-cpp-python's
`Llama(lora_path=FILE)`), to apply on the base model's GGUF file (`gguf_export.save_gguf`).

The layout is the one llama.cpp's convert_lora_to_gguf.py writes: general.type "adapter", adapter.type "lora",
adapter.lora.alpha, and for each adapted weight `W` of the base file the tensors `W.lora_a` (r, in) and
`W.lora_b` (out, r); llama.cpp adds (alpha / r) B A x, r being each `lora_b`'s rank. lmlab's fused layers are
llama.cpp's separate ones (q, k, v; gate, up): one update B A of a fused weight is each part's rows of B with
the same A, the rows of B placed (and, for Llama's q and k, reordered) by the family's tensor layout, `to_gguf`
itself. Each layer's own scale is folded into its B where it differs from the file's alpha / r.
"""

from pathlib import Path

import gguf
import torch

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.models.gguf_export import gguf_module
from lmlab.models.llama.gguf import to_gguf
from lmlab.modules.peft.core import peft_modules
from lmlab.modules.peft.lora import LoRALinear
from lmlab.modules.transformer import TransformerDecoder


def save_gguf_lora(model: TransformerDecoder, path: str | Path, name: str = "") -> Path:
    """Write the LoRA layers of `model` (its base weights unmerged) as llama.cpp's GGUF LoRA adapter `path`."""
    cfg = model.config
    family = gguf_module(cfg)
    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    others = [type(m).__name__ for m in peft_modules(model) if not isinstance(m, LoRALinear)]
    if not layers or others:
        raise LmlabError(f"the model holds {others[0] if others else 'no LoRA'} adapter layers; llama.cpp's --lora "
                         "files hold LoRA only (merge it with --merge-lora, or export the adapter --to peft)")
    if any(layer.merged for layer in layers.values()):
        raise LmlabError("the model's LoRA is merged into its weights already; export the run's adapter unmerged")
    alpha = next(iter(layers.values())).scale * next(iter(layers.values())).rank
    tensors = {}
    for part, matrix in (("lora_b", lambda m: m.lora_b * (m.scale * m.rank / alpha)), ("lora_a", None)):
        for g, t in _in_gguf_layout(model, layers, matrix).items():
            tensors[f"{g}.{part}"] = t
    with atomic_path(path) as tmp:
        writer = gguf.GGUFWriter(str(tmp), family.ARCHITECTURE)
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(alpha))
        writer.add_name(name or Path(path).stem)
        for tensor_name, tensor in sorted(tensors.items()):
            writer.add_tensor(tensor_name, tensor.detach().float().contiguous().numpy())
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return Path(path)


def _in_gguf_layout(model: TransformerDecoder, layers: dict[str, LoRALinear], b_of) -> dict[str, torch.Tensor]:
    """GGUF weight name -> its part of each LoRA layer's B (`b_of` given: (out, r) rows, split and reordered
    as the weight's rows are) or A (`b_of` None: the layer's whole A, (r, in), shared by its parts).

    `to_gguf` places rows; it runs on a state of (out, k) stand-ins: B itself, or for A a column holding the
    layer's index (every row alike), which names the layer each GGUF part came from."""
    cfg, ours = model.config, {f"{name}.weight": layer for name, layer in layers.items()}
    if "lm_head.weight" in ours and cfg.tie_embeddings:
        raise LmlabError("the LoRA adapts the LM head, which the GGUF file ties to the embedding (llama.cpp's --lora "
                         "cannot adapt it); merge it with --merge-lora instead")
    index = {name: i for i, name in enumerate(ours)}
    state = {}
    for name, p in model.state_dict().items():  # (out, 0): a weight or bias no LoRA adapts
        state[name] = (b_of(ours[name]) if b_of else torch.full((p.shape[0], 1), float(index[name]))
                       ) if name in ours else p.new_zeros(p.shape[0], 0)
    placed = {g: t for g, t in to_gguf(state, cfg, gguf_module(cfg).LAYOUT).items() if t.dim() == 2 and t.shape[1]}
    if b_of:
        return placed
    names = list(ours)
    return {g: ours[names[int(t[0, 0])]].lora_a for g, t in placed.items()}
