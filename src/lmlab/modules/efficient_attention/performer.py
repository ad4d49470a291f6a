"""Performer's FAVOR+ (Choromanski et al., 2021): softmax attention approximated in linear time with positive
orthogonal random features.

exp(q . k) = E_w[phi(q) phi(k)] with phi(x) = exp(w . x - |x|^2 / 2) / sqrt(m), w ~ N(0, I): so
softmax(Q K^T) V ~ phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1), computed right to left in O(T m D). The m
features are drawn in orthogonal blocks (lower variance) with Gaussian-like norms, once, from a seed, and kept
as a buffer. Causal attention needs prefix sums of phi(k) v^T; they are carried chunk by chunk (a masked
quadratic product inside each chunk of `chunk` positions), so memory stays O(T m + chunk^2), not O(T m D).
"""

import math

import torch
from torch import nn

TINY = 1e-30  # a denominator floor: a padded query may see no key's feature at all


def orthogonal_features(m: int, d: int, seed: int) -> torch.Tensor:
    """(m, d) Gaussian rows, orthogonal within each block of d, each scaled to a chi(d)-distributed norm."""
    generator = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(math.ceil(m / d)):
        q, _ = torch.linalg.qr(torch.randn(d, d, generator=generator))
        blocks.append(q.T)
    norms = torch.randn(m, d, generator=generator).norm(dim=1, keepdim=True)  # (m, 1)
    return torch.cat(blocks)[:m] * norms


class PerformerAttention(nn.Module):
    """FAVOR+ attention: q (B, H, T, D), k, v (B, H, S, D) -> (B, H, T, D), with `features` random features."""

    def __init__(self, causal: bool, head_dim: int, features: int, chunk: int = 64, seed: int = 0):
        super().__init__()
        self.causal, self.chunk = causal, chunk
        self.register_buffer("projection", orthogonal_features(features, head_dim, seed), persistent=False)

    def phi(self, x: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
        """Positive features (B, H, T, m) of x (B, H, T, D) scaled by D^-1/4, so phi(q) phi(k) ~ exp(q.k/sqrt(D)).
        A max is subtracted inside the exp for stability: per query row (it cancels in the row's ratio), or,
        for keys (`real` (B, T) given: True at real tokens, zero features elsewhere), over all real keys (a common
        factor of numerator and denominator)."""
        x = x * x.size(-1) ** -0.25
        logits = x @ self.projection.to(x.dtype).T - (x * x).sum(-1, keepdim=True) / 2  # (B, H, T, m)
        if real is None:
            shift = logits.amax(dim=-1, keepdim=True)
        else:
            logits = logits.masked_fill(~real[:, None, :, None], float("-inf"))
            shift = logits.amax(dim=(-2, -1), keepdim=True)
        return torch.exp(logits - shift.detach()) / math.sqrt(self.projection.size(0))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                key_padding: torch.Tensor | None = None) -> torch.Tensor:
        real = torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device) if key_padding is None \
            else key_padding.bool()
        fq, fk = self.phi(q), self.phi(k, real)  # (B, H, T, m), (B, H, S, m)
        if not self.causal:
            kv = fk.transpose(-2, -1) @ v  # (B, H, m, D)
            return (fq @ kv) / (fq @ fk.sum(dim=2)[..., None]).clamp(min=TINY)
        T, S = q.size(2), k.size(2)
        state = fk[:, :, :S - T].transpose(-2, -1) @ v[:, :, :S - T]  # (B, H, m, D): keys before the queries
        total = fk[:, :, :S - T].sum(dim=2)  # (B, H, m)
        outputs = []
        chunks = zip(*(x.split(self.chunk, dim=2) for x in (fq, fk[:, :, S - T:], v[:, :, S - T:])))  # one split:
        for cq, ck, cv in chunks:  # its backward is one concatenation, not a zero-filled copy per chunk
            inside = (cq @ ck.transpose(-2, -1)).tril()  # (B, H, c, c): keys of the chunk up to each query
            numerator = cq @ state + inside @ cv  # (B, H, c, D)
            denominator = cq @ total[..., None] + inside.sum(dim=-1, keepdim=True)  # (B, H, c, 1)
            outputs.append(numerator / denominator.clamp(min=TINY))
            state = state + ck.transpose(-2, -1) @ cv
            total = total + ck.sum(dim=2)
        return torch.cat(outputs, dim=2)
