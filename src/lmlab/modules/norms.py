"""Normalisation layers: LayerNorm (GPT-2, BERT) and RMSNorm (Llama, T5)."""

import torch
import torch.nn.functional as F
from torch import nn

LayerNorm = nn.LayerNorm


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight: LayerNorm without centring or bias; computed in fp32."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.rms_norm(x.float(), (x.size(-1),), eps=self.eps)  # one fused op
        return self.weight * h.to(x.dtype)
