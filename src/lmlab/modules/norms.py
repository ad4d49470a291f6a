"""Normalisation layers: LayerNorm (GPT-2, BERT) and RMSNorm (Llama, T5)."""

import torch
from torch import nn

from lmlab.modules.fused_rms_norm import fused_rms_norm

LayerNorm = nn.LayerNorm


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight: LayerNorm without centring or bias; computed in fp32
    (one autograd op with a hand-written backward: fused_rms_norm.py)."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_rms_norm(x, self.weight, self.eps)
