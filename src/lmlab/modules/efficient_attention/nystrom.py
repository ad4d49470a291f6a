"""Nyströmformer (Xiong et al., 2021): softmax attention through `landmarks` segment means, in O(T m).

With landmark queries Q~ and keys K~ (the means of consecutive segments of Q and K),
softmax(Q K^T) V ~ softmax(Q K~^T) pinv(softmax(Q~ K~^T)) softmax(Q~ K^T) V, the pseudo-inverse by the
paper's iteration Z <- Z (13 I - A Z (15 I - A Z (7 I - A Z))) / 4 from Z0 = A^T / (|A|_1 |A|_inf). With as
many landmarks as tokens the three softmaxes are one matrix A and the product is A V: full attention.
Landmarks average over the whole sequence, so there is no causal form, and a causal model refuses it.
Padded tokens are left out of the means and masked out as keys.
"""

import math

import torch
from torch import nn


def iterative_pinv(a: torch.Tensor, iterations: int) -> torch.Tensor:
    """The Moore-Penrose pseudo-inverse of each (m, m) matrix of `a` (..., m, m), by Nyströmformer's iteration."""
    eye = torch.eye(a.size(-1), dtype=a.dtype, device=a.device)
    z = a.transpose(-2, -1) / (a.abs().sum(-2).amax(-1) * a.abs().sum(-1).amax(-1))[..., None, None]
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


class NystromAttention(nn.Module):
    """q, k, v (B, H, T, D) -> (B, H, T, D) through `landmarks` landmarks."""

    def __init__(self, landmarks: int, iterations: int = 6):
        super().__init__()
        self.landmarks, self.iterations = landmarks, iterations

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                key_padding: torch.Tensor | None = None) -> torch.Tensor:
        B, H, T, D = q.shape
        m = min(self.landmarks, T)
        real = torch.ones(B, T, dtype=q.dtype, device=q.device) if key_padding is None else key_padding.to(q.dtype)
        segment = torch.arange(T, device=q.device) * m // T  # (T,): which landmark each position belongs to
        counts = torch.zeros(B, m, dtype=q.dtype, device=q.device).index_add_(1, segment, real).clamp(min=1)
        weights = real[:, None, :, None] / counts[:, None, segment, None]  # (B, 1, T, 1): a mean over real tokens

        def means(x: torch.Tensor) -> torch.Tensor:  # (B, H, T, D) -> (B, H, m, D)
            return torch.zeros(B, H, m, D, dtype=x.dtype, device=x.device).index_add_(2, segment, x * weights)

        ql, kl = means(q), means(k)
        scale = 1 / math.sqrt(D)
        kernel_1 = (q @ kl.transpose(-2, -1) * scale).softmax(dim=-1)  # (B, H, T, m)
        kernel_2 = (ql @ kl.transpose(-2, -1) * scale).softmax(dim=-1)  # (B, H, m, m)
        scores_3 = ql @ k.transpose(-2, -1) * scale  # (B, H, m, T)
        if key_padding is not None:
            scores_3 = scores_3.masked_fill(~key_padding.bool()[:, None, None, :], float("-inf"))
        kernel_3 = scores_3.softmax(dim=-1)
        return kernel_1 @ (iterative_pinv(kernel_2, self.iterations) @ (kernel_3 @ v))
