"""Linear layers and embeddings on int8 / int4 weights: drop-ins for `nn.Linear` and `nn.Embedding`.

The integers, scales and mins are buffers, not parameters: they are not trained, and a model's
parameters stay its float ones (norms, biases), so code that reads `next(model.parameters())` for the
device and dtype sees fp32. Activations stay fp32, unless a layer's `activations` names how llama.cpp
rounds them for the GGUF type its weight came from (`activation_rounding.py`); the formats are in
`quantized_formats.py`, the products in `quantized_ops.py`. A tied LM head is
`QuantizedEmbedding.as_linear()`: the same tensors.
"""

import torch
from torch import nn

from lmlab.modules.quantized_formats import QuantizedWeight
from lmlab.modules.quantized_ops import embedding_rows, quantized_linear, rounded_linear


class _Quantized(nn.Module):
    """Holds a `QuantizedWeight` as the buffers qweight, scales and (int4) mins."""

    def __init__(self, weight: QuantizedWeight):
        super().__init__()
        self.group_size = weight.group_size
        self.register_buffer("qweight", weight.q)
        self.register_buffer("scales", weight.scales)
        self.register_buffer("mins", weight.mins)  # None for int8: left out of the state dict

    @property
    def weight(self) -> QuantizedWeight:
        return QuantizedWeight(self.qweight, self.scales, self.mins, self.group_size)

    @property
    def bits(self) -> int:
        return self.weight.bits

    def extra_repr(self) -> str:
        out, width = self.weight.shape
        return f"{width}, {out}, int{self.bits}, group_size={self.group_size}, scales={self.scales.dtype}"


class QuantizedLinear(_Quantized):
    """y = x W^T + b for W (out, in) stored as int8 or int4: forward(x (..., in)) -> (..., out). `activations`
    (None: x as it is) names one of `activation_rounding`'s kinds (q8_0, q8_1, q8_K, f16, bf16): x is rounded
    first, as llama.cpp rounds it."""

    def __init__(self, weight: QuantizedWeight, bias: torch.Tensor | None = None, activations: str | None = None):
        super().__init__(weight)
        self.out_features, self.in_features = weight.shape
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None
        self.activations = activations

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.activations is None:
            return quantized_linear(x, self.weight, self.bias)
        return rounded_linear(x, self.weight, self.activations, self.bias)

    def extra_repr(self) -> str:
        rounding = f", activations={self.activations}" if self.activations else ""
        return super().extra_repr() + rounding


class QuantizedEmbedding(_Quantized):
    """A token table (vocab, d) stored as int8 or int4: forward(ids (...)) -> (..., d) fp32."""

    def __init__(self, weight: QuantizedWeight):
        super().__init__(weight)
        self.num_embeddings, self.embedding_dim = weight.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return embedding_rows(ids, self.weight)

    def as_linear(self) -> QuantizedLinear:
        """An LM head on this table (logits = h E^T), sharing its tensors: the tied head of a decoder."""
        return QuantizedLinear(self.weight)
