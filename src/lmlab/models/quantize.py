"""Quantizing a decoder's weights: int8 or int4 linear layers, an int8 embedding shared with a tied LM head.

`quantize_model` swaps, in place, every `nn.Linear` of the decoder's blocks for a `QuantizedLinear`
(int8: symmetric, one scale per output channel; int4: asymmetric scale + min per group of
`group_size` inputs) and the token embedding and LM head for int8 per-row tables (one shared table
when they are tied). The head and embedding are int8 in both modes: the LM head is a decode step's
largest matrix (SmolLM2-135M: 49152 x 576) and the one where rounding shows most in the logits, and
int8 already streams it 4x faster than fp32. Norms, biases, the KV cache and the activations stay fp32.

`quantized_decoder` builds a model from a state dict in the same layout (`<layer>.qweight`,
`.scales`, `.mins`): how saved and cached quantized models are read back. `dequantize_model` undoes
the swap (fp32 layers holding the dequantized values).
"""

import torch
from torch import nn

from lmlab.config import ModelConfig
from lmlab.errors import LmlabError
from lmlab.models import registry
from lmlab.models.number_formats import MODES
from lmlab.modules.meta import on_meta
from lmlab.modules.quantized import QuantizedEmbedding, QuantizedLinear
from lmlab.modules.quantized_formats import RUN, QuantizedWeight, dequantize, quantize_int4, quantize_int8
from lmlab.modules.transformer import TransformerDecoder

QUANTIZED_PARTS = ("qweight", "scales", "mins")  # the state dict names of a quantized layer's tensors


@torch.no_grad()
def quantize_model(model: TransformerDecoder, mode: str, group_size: int = 32) -> TransformerDecoder:
    """Quantize `model`'s weights in place (see the module docstring) and return it, ready for inference.
    `group_size` is int4's: a multiple of 32 that divides every linear layer's input width."""
    if mode not in MODES:
        raise LmlabError(f"quantization mode '{mode}' is not one of {', '.join(MODES)}")
    if any(isinstance(m, (QuantizedLinear, QuantizedEmbedding)) for m in model.modules()):
        raise LmlabError("the model is quantized already; quantize the float model it came from (rounding "
                         "rounded weights again adds error)")
    if mode == "int4":
        check_group_size(model, group_size)
    for block in model.blocks:
        for name, linear in list(block.named_modules()):
            if isinstance(linear, nn.Linear):
                weight = quantize_int4(linear.weight, group_size) if mode == "int4" else quantize_int8(linear.weight)
                block.set_submodule(name, QuantizedLinear(weight, _bias(linear)))
    tied = model.lm_head.weight is model.token_embedding.weight
    embedding = QuantizedEmbedding(quantize_int8(model.token_embedding.weight))
    head = embedding.as_linear() if tied else QuantizedLinear(quantize_int8(model.lm_head.weight), _bias(model.lm_head))
    model.token_embedding, model.lm_head = embedding, head
    return model.eval()


def check_group_size_value(group_size: int, name: str = "int4 group size") -> None:
    """int4's group size is a positive multiple of 32 (a whole number of packed runs); `name` says it in the error."""
    if group_size <= 0 or group_size % RUN:
        raise LmlabError(f"{name} {group_size} is not a positive multiple of {RUN}; use 32, 64 or 128")


def check_group_size(model: TransformerDecoder, group_size: int) -> None:
    """int4's group size fits every linear layer of the blocks: a positive multiple of 32 dividing its input."""
    check_group_size_value(group_size)
    for i, block in enumerate(model.blocks):
        for name, linear in block.named_modules():
            if isinstance(linear, nn.Linear) and linear.in_features % group_size:
                raise LmlabError(f"int4 group size {group_size} does not divide the {linear.in_features} inputs of "
                                 f"blocks.{i}.{name}; use a multiple of {RUN} that divides it (32 always does "
                                 f"when the widths are multiples of 32)")


@torch.no_grad()
def dequantize_model(model: TransformerDecoder) -> TransformerDecoder:
    """Swap every quantized layer of `model` for an fp32 one holding its dequantized values, in place."""
    for name, module in list(model.named_modules()):
        if isinstance(module, QuantizedLinear):
            linear = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None, device="meta")
            linear.weight = nn.Parameter(dequantize(module.weight), requires_grad=False)
            if module.bias is not None:
                linear.bias = nn.Parameter(module.bias.detach().clone(), requires_grad=False)
            model.set_submodule(name, linear)
        elif isinstance(module, QuantizedEmbedding):
            table = dequantize(module.weight)
            model.set_submodule(name, nn.Embedding(*table.shape, _weight=table))
    if model.config.tie_embeddings:
        model.lm_head.weight = model.token_embedding.weight
    return model.eval()


def quantized_decoder(cfg: ModelConfig, state: dict[str, torch.Tensor]) -> TransformerDecoder:
    """The decoder for `cfg` whose layers take `state`'s tensors (no copy): a layer with `<name>.qweight` in
    `state` becomes quantized, the rest (norms, float layers) are loaded as they are. The tied LM head
    shares the embedding's tensors and is not in `state`. Shapes are the caller's to check first
    (`models/quantized_files.py`)."""
    with on_meta():
        model = registry.build(cfg)
    return fill_quantized(model, state)


def fill_quantized(model: TransformerDecoder, state: dict[str, torch.Tensor]) -> TransformerDecoder:
    """`quantized_decoder` on a decoder already built on the meta device (`model`, filled in place)."""
    cfg = model.config
    state = dict(state)
    for name, module in list(model.named_modules()):
        if f"{name}.qweight" not in state or not isinstance(module, (nn.Linear, nn.Embedding)):
            continue
        q, scales, mins = state.pop(f"{name}.qweight"), state.pop(f"{name}.scales"), state.pop(f"{name}.mins", None)
        weight = QuantizedWeight(q, scales, mins, input_width(module) // scales.shape[1])
        layer = QuantizedEmbedding(weight) if isinstance(module, nn.Embedding) else QuantizedLinear(
            weight, state.get(f"{name}.bias"))  # the bias stays in `state`: load_state_dict assigns it
        model.set_submodule(name, layer)
    if cfg.tie_embeddings and isinstance(model.token_embedding, QuantizedEmbedding):
        model.lm_head = model.token_embedding.as_linear()
    elif cfg.tie_embeddings:
        state["lm_head.weight"] = state["token_embedding.weight"]
    loaded = model.load_state_dict(state, assign=True, strict=False)  # the quantized layers hold theirs already
    left = loaded.unexpected_keys + [k for k in loaded.missing_keys if not k.endswith(QUANTIZED_PARTS)]
    assert not left, f"state dict does not fit the model: {left[:3]}"
    if cfg.tie_embeddings and not isinstance(model.token_embedding, QuantizedEmbedding):
        model.lm_head.weight = model.token_embedding.weight
    return model.eval()


def input_width(module: nn.Linear | nn.Embedding) -> int:
    """The width of what a layer's rows are dotted with: a linear layer's inputs, an embedding's dimension."""
    return module.in_features if isinstance(module, nn.Linear) else module.embedding_dim


def quantized_state(model: TransformerDecoder) -> dict[str, torch.Tensor]:
    """The tensors to save of a (partly) quantized decoder: its state dict without the tied LM head."""
    tied = model.config.tie_embeddings
    return {k: v.detach().contiguous() for k, v in model.state_dict().items()
            if not (tied and k.startswith("lm_head."))}


def _bias(linear: nn.Linear) -> torch.Tensor | None:
    return linear.bias.detach() if linear.bias is not None else None
