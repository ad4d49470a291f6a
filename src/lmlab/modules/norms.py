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


class AllHeadsRMSNorm(RMSNorm):
    """RMSNorm of queries or keys (B, H, T, D) over all their heads at once, a weight of H * D (OLMo 2's
    q and k norms; Qwen3's and Gemma 3's are a plain `RMSNorm(D)`, each head on its own)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, H, T, D = x.shape
        y = super().forward(x.transpose(1, 2).reshape(B, T, H * D))  # (B, T, H * D)
        return y.view(B, T, H, D).transpose(1, 2)
