"""How the weights lie in memory while decoding on the CPU.

A decoding step multiplies every weight matrix by one vector per row, so its speed is how fast
the matrix products stream the weights from memory. MKL, which runs torch's fp32 matmuls on the
CPU, does not stream both layouts equally fast. Measured on an AMD EPYC (MKL 2024.2) with
SmolLM2-135M's matrices, one row reads a wide `nn.Linear` weight (out > in: the fused qkv,
gate/up and LM head) 1.3-2x faster stored column-major (the transpose of a contiguous (in, out)
matrix) than row-major, the layout nn.Linear creates; square and tall ones (out <= in) and every
matrix at eight rows are faster row-major. Both layouts hold the same values in the same (out, in)
shape and F.linear takes either, so only the speed changes (one-row decoding: ~1.4x).
"""

import torch
from torch import nn


def arrange_for_decoding(model: nn.Module, rows: int) -> None:
    """Lay out the nn.Linear weights of a CPU `model` in eval mode for decoding `rows` rows at a time:
    wide ones column-major for one row, all row-major for more. A model being trained keeps its
    layout. Changing it copies those weights once (~0.3 s for 135M parameters); later calls find it done."""
    if model.training:
        return
    # outside inference mode: the new weights are ordinary tensors, which training may use later
    with torch.inference_mode(False), torch.no_grad():
        for module in model.modules():
            if not isinstance(module, nn.Linear) or module.weight.device.type != "cpu":
                continue
            weight = module.weight  # (out, in)
            column_major = rows == 1 and weight.size(0) > weight.size(1)
            if column_major and weight.is_contiguous():
                weight.data = weight.data.t().contiguous().t()  # an (out, in) view of an (in, out) matrix
            elif not column_major and not weight.is_contiguous():
                weight.data = weight.data.contiguous()
