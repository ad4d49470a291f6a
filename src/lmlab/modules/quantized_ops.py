"""y = x W^T and embedding rows for quantized weights: the C++ kernels where they serve, torch elsewhere.

A few rows of x (a decoding step) go to the kernels, which stream the integers and keep x in fp32.
Many rows (a prompt) are a real matrix product, where MKL's fp32 GEMM on a dequantized copy of the
weight is faster than any matrix-vector kernel: the kernels' op makes that choice itself (the copy is
made per call, well under a millisecond for SmolLM2's largest matrix, spread over the prompt's rows, and
dropped, so no fp32 weights stay in memory). Off the CPU, or where the kernels could not be built,
everything dequantizes in torch.
"""

import torch
import torch.nn.functional as F

from lmlab.modules.activation_rounding import KERNEL_CODES, q8_1_min_correction, round_activations
from lmlab.modules.kernels.build import kernel_ops
from lmlab.modules.quantized_formats import QuantizedWeight, dequantize, select_rows


def quantized_linear(x: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., in) @ W^T (+ bias) -> (..., out), in x's dtype; W stays quantized in memory. fp32 x on the CPU
    goes straight to the kernels' op (which picks its path by the number of rows), anything else through torch."""
    ops = kernel_ops() if x.is_cpu and x.dtype == torch.float32 else None
    if ops is None:
        y = F.linear(x, dequantized(weight).to(x.dtype))
    elif weight.bits == 4:
        y = ops.int4_linear(x, weight.q, weight.scales, weight.mins, weight.group_size)
    else:
        y = ops.int8_linear(x, weight.q, weight.scales, weight.group_size)
    return y if bias is None else y + bias


def rounded_linear(x: torch.Tensor, weight: QuantizedWeight, activations: str,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., in) rounded as llama.cpp rounds it for `activations` (an `activation_rounding` kind), @ W^T (+ bias)
    -> (..., out). fp32 x on the CPU goes to the kernels' op, which multiplies the 8-bit integers; otherwise the
    rounded values go through `quantized_linear`, with q8_1's min correction."""
    ops = kernel_ops() if x.is_cpu and x.dtype == torch.float32 else None
    if ops is not None and activations in KERNEL_CODES:
        y = ops.rounded_linear(x, weight.q, weight.scales, weight.mins, weight.group_size, KERNEL_CODES[activations])
        return y if bias is None else y + bias
    rounded = round_activations(x, activations)  # (..., in)
    y = quantized_linear(rounded, weight, bias)
    if activations == "q8_1" and weight.bits == 4:
        y = y + q8_1_min_correction(x, rounded, weight.int4_mins())
    return y


def dequantized(weight: QuantizedWeight) -> torch.Tensor:
    """The fp32 matrix (out, in) of `weight`, by the kernels on the CPU (threaded), else in torch."""
    ops = kernel_ops() if weight.q.is_cpu else None
    if ops is None:
        return dequantize(weight)
    if weight.bits == 4:
        return ops.int4_dequantize(weight.q, weight.scales, weight.mins, weight.group_size)
    return ops.int8_dequantize(weight.q, weight.scales, weight.group_size)


def embedding_rows(ids: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """The fp32 rows of the table `weight` (vocab, d) for token ids (...) -> (..., d): only those rows
    are dequantized."""
    rows = dequantized(select_rows(weight, ids.reshape(-1)))  # (n, d)
    return rows.view(*ids.shape, weight.shape[1])
