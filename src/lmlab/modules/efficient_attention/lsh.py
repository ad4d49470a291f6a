"""Reformer's LSH attention (Kitaev et al., 2020): each query attends only to the keys that hash to its bucket.

Queries and keys share one projection (a key is its query scaled to unit length), so similar vectors hash
alike under angular LSH: bucket = argmax([x R; -x R]) for a random rotation R. Positions are sorted by
(bucket, position) and cut into chunks of `bucket_size`; each chunk attends to itself and the chunk before
(a bucket may straddle them); padded positions sort after every bucket. A query sees itself only when nothing
else is visible (a shared key would otherwise always win). `n_hashes` rounds with independent rotations are
combined, each weighted by its share of the softmax mass (the log-sum-exp of its scores), so a key missed by one
round is caught by another. The rotations are drawn once, from a seed, and kept as a buffer.
"""

import math

import torch
from torch import nn

from lmlab.errors import LmlabError

SELF_SCORE = -1e5  # Reformer's: a query's own key, used only when its row has nothing else


class LSHAttention(nn.Module):
    """q (B, H, T, D) (k is ignored: keys are the queries, normalised), v (B, H, T, D) -> (B, H, T, D)."""

    def __init__(self, causal: bool, head_dim: int, bucket_size: int, n_hashes: int, seed: int = 0,
                 max_buckets: int = 1024):
        super().__init__()
        self.causal, self.bucket_size, self.n_hashes = causal, bucket_size, n_hashes
        generator = torch.Generator().manual_seed(seed)
        self.register_buffer("rotations", torch.randn(n_hashes, head_dim, max_buckets // 2, generator=generator),
                             persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                key_padding: torch.Tensor | None = None) -> torch.Tensor:
        B, H, T, D = q.shape
        if v.size(2) != T:
            raise LmlabError("LSH attention sorts the whole sequence into buckets and has no step-by-step decoding "
                             "from a KV cache; generate with a model of --attention full, window, bigbird or performer")
        c = self.bucket_size
        n_chunks = math.ceil(T / c)
        pad = n_chunks * c - T
        n_buckets = min(max(2, 2 * math.ceil(T / (2 * c))), 2 * self.rotations.size(-1))
        keys = q / q.norm(dim=-1, keepdim=True).clamp(min=1e-6)  # (B, H, T, D)
        real = torch.ones(B, T, dtype=torch.bool, device=q.device) if key_padding is None else key_padding.bool()
        outputs, masses = [], []
        for r in range(self.n_hashes):
            rotated = keys @ self.rotations[r, :, :n_buckets // 2].to(q.dtype)  # (B, H, T, nb / 2)
            buckets = torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)  # (B, H, T)
            buckets = buckets.masked_fill(~real[:, None, :], n_buckets)  # padding sorts last, out of real chunks
            order = (buckets * T + torch.arange(T, device=q.device)).argsort(dim=-1)  # (B, H, T): sorted positions
            order = torch.nn.functional.pad(order, (0, pad), value=-1)  # (B, H, n c); -1 = padding slot
            slot_ok = order >= 0
            pos = order.clamp(min=0)

            def chunked(x: torch.Tensor, pos: torch.Tensor = pos) -> torch.Tensor:  # (B, H, T, D) -> (B, H, n, c, D)
                return x.gather(2, pos[..., None].expand(-1, -1, -1, x.size(-1))).view(B, H, n_chunks, c, -1)

            sq, sk, sv = chunked(q), chunked(keys), chunked(v)  # sorted by bucket
            sp, slot = pos.view(B, H, n_chunks, c), slot_ok.view(B, H, n_chunks, c)
            seen = slot & real.gather(1, pos.flatten(1)).view(B, H, n_chunks, c)  # a real key in a real slot
            kb, vb, pb, slot_b, seen_b = (torch.cat([x.roll(1, dims=2), x], dim=3) for x in (sk, sv, sp, slot, seen))
            slot_b[:, :, 0, :c] = seen_b[:, :, 0, :c] = False  # the first chunk has no previous one
            scores = (sq @ kb.transpose(-2, -1)) / math.sqrt(D)  # (B, H, n, c, 2c)
            mask = seen_b[:, :, :, None, :]
            if self.causal:
                mask = mask & (pb[:, :, :, None, :] <= sp[..., None])
            itself = (pb[:, :, :, None, :] == sp[..., None]) & slot_b[:, :, :, None, :]
            scores = scores.masked_fill(~mask, float("-inf")).masked_fill(itself, SELF_SCORE)
            scores = scores.masked_fill(~slot[..., None], 0.0)  # the last chunk's filler slots: any finite row
            mass = scores.logsumexp(dim=-1, keepdim=True)  # (B, H, n, c, 1)
            out = (scores - mass).exp() @ vb  # (B, H, n, c, D)
            back = torch.zeros(B, H, T + 1, D + 1, dtype=q.dtype, device=q.device)
            index = torch.where(slot_ok, order, T)[..., None].expand(-1, -1, -1, D + 1)
            back.scatter_(2, index, torch.cat([out, mass], dim=-1).view(B, H, n_chunks * c, D + 1))
            outputs.append(back[:, :, :T, :D])
            masses.append(back[:, :, :T, D:])
        weights = torch.cat(masses, dim=-1).softmax(dim=-1)  # (B, H, T, rounds): each round's share
        return sum(out * weights[..., r:r + 1] for r, out in enumerate(outputs))
