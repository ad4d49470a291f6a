"""Sparse attention patterns: a sliding window with global tokens (Longformer) and BigBird's window + global +
random blocks, computed block by block so that time and memory grow as T * (keys per query), not T^2.

Both are one engine. Queries are cut into blocks of `block` positions; query block i gathers a few key blocks
(its neighbours, and for BigBird some random ones) plus the `n_global` first tokens, scores them, and masks
what the exact pattern forbids (`allowed`). The global tokens also attend to every key (bidirectional only:
causally, a first token has nothing but global tokens to look at anyway). The same `allowed` rule, applied as
a dense mask over all keys, decodes new tokens from a KV cache and is the tests' reference.
"""

import math

import torch
from torch import nn

from lmlab.modules.efficient_attention.masking import masked_softmax_attend


class SparseAttention(nn.Module):
    """Window (+ global tokens, + random blocks) attention: q (B, H, T, D), k, v (B, H, S, D) -> (B, H, T, D).

    `window`: a query sees keys less than `window` positions away (causal: `window` positions back, itself
    included). BigBird (`random_blocks` > 0) works in blocks of `block`: a query block sees its own and the
    neighbouring key blocks, the global tokens, and `random_blocks` other key blocks drawn once per query
    block from `seed` (causal: earlier blocks only), so decoding and a full pass agree.
    """

    def __init__(self, causal: bool, window: int, n_global: int = 0, random_blocks: int = 0, block: int | None = None,
                 seed: int = 0):
        super().__init__()
        self.causal, self.window, self.n_global = causal, window, n_global
        self.random_blocks, self.seed = random_blocks, seed
        self.block = block if random_blocks else window  # Longformer: blocks as wide as the window

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                key_padding: torch.Tensor | None = None) -> torch.Tensor:
        T, S = q.size(2), k.size(2)
        if T < S or T <= self.block:  # decoding from a cache, or a sequence of one block: a dense mask is cheaper
            allowed = self.allowed(torch.arange(S - T, S, device=q.device), torch.arange(S, device=q.device))
            return masked_softmax_attend(q, k, v, allowed, key_padding)
        out = self._blocks(q, k, v, key_padding)
        if self.n_global and not self.causal:  # global queries read every key
            rows = slice(0, min(self.n_global, T))
            everything = torch.ones(rows.stop, S, dtype=torch.bool, device=q.device)
            out[:, :, rows] = masked_softmax_attend(q[:, :, rows], k, v, everything, key_padding, query_start=0)
        return out

    def allowed(self, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """(T, S) bool: may the query at each of `query_pos` look at the key at each of `key_pos`?"""
        qp, kp = query_pos[:, None], key_pos[None, :]
        if self.random_blocks:
            qb, kb = qp // self.block, kp // self.block
            near = (qb - kb).abs() <= 1
            picked = self.random_key_blocks(int(qb.max()) + 1, int(kb.max()) + 1).to(qp.device)  # (nq, r)
            near = near | (picked[qb.squeeze(1)][:, :, None] == kb[:, None, :]).any(dim=1)
        else:
            near = (qp - kp).abs() < self.window
        near = near | (kp < self.n_global)
        if not self.causal:
            near = near | (qp < self.n_global)
        return near & (kp <= qp) if self.causal else near

    def random_key_blocks(self, n_query_blocks: int, n_key_blocks: int) -> torch.Tensor:
        """(n_query_blocks, random_blocks) key block indices, -1 where there is none to draw: for each query
        block, blocks outside its neighbours and the global ones (causal: before them), fixed by `seed`."""
        picked = torch.full((n_query_blocks, self.random_blocks), -1, dtype=torch.long)
        first = self.n_global // self.block  # blocks wholly global are seen anyway
        for i in range(n_query_blocks):
            last = i - 1 if self.causal else n_key_blocks  # exclusive bound of the candidates
            candidates = [b for b in range(first, min(last, n_key_blocks)) if abs(b - i) > 1]
            if candidates:
                generator = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
                order = torch.randperm(len(candidates), generator=generator)[:self.random_blocks]
                picked[i, :len(order)] = torch.tensor(candidates)[order]
        return picked

    def _blocks(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                key_padding: torch.Tensor | None) -> torch.Tensor:
        """The full pass, block by block: each query block against its gathered key blocks and the globals."""
        B, H, T, D = q.shape
        b, device = self.block, q.device
        n = math.ceil(T / b)
        pad = n * b - T
        q, k, v = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k, v))  # (B, H, n b, D)
        offsets = torch.tensor([-1, 0] if self.causal else [-1, 0, 1], device=device)
        blocks = torch.arange(n, device=device)[:, None] + offsets  # (n, 2 or 3)
        if self.random_blocks:
            blocks = torch.cat([blocks, self.random_key_blocks(n, n).to(device)], dim=1)  # (n, m)
        valid = (blocks >= 0) & (blocks < n)
        blocks = blocks.clamp(0, n - 1)
        key_pos = (blocks[:, :, None] * b + torch.arange(b, device=device)).flatten(1)  # (n, m b)
        key_ok = valid.repeat_interleave(b, dim=1) & (key_pos < T) & (key_pos >= self.n_global)  # globals come apart
        gather = key_pos.flatten()  # (n m b,)
        keys = k[:, :, gather].view(B, H, n, -1, D)  # (B, H, n, m b, D)
        values = v[:, :, gather].view(B, H, n, -1, D)
        query_pos = torch.arange(n * b, device=device).view(n, b)  # (n, b)
        mask = key_ok[:, None, :] & self._rule(query_pos[:, :, None], key_pos[:, None, :])  # (n, b, m b)
        if self.n_global:
            g = min(self.n_global, T)
            keys = torch.cat([k[:, :, None, :g].expand(B, H, n, g, D), keys], dim=3)  # (B, H, n, g + m b, D)
            values = torch.cat([v[:, :, None, :g].expand(B, H, n, g, D), values], dim=3)
            global_pos = torch.arange(g, device=device)
            mask = torch.cat([(global_pos <= query_pos[:, :, None]) if self.causal else
                              torch.ones(n, b, g, dtype=torch.bool, device=device), mask], dim=2)
            key_pos = torch.cat([global_pos.expand(n, g), key_pos], dim=1)
        slot_ok = torch.cat([torch.ones(n, key_pos.size(1) - key_ok.size(1), dtype=torch.bool, device=device),
                             key_ok], dim=1)  # (n, keys): a real slot, not a clamped or duplicate one
        itself = (key_pos[:, None, :] == query_pos[:, :, None]) & slot_ok[:, None, :]  # (n, b, keys)
        mask = mask[None, None]  # (1, 1, n, b, keys)
        if key_padding is not None:
            real = torch.nn.functional.pad(key_padding, (0, pad))[:, key_pos]  # (B, n, keys)
            mask = mask & real[:, None, :, None, :]
        mask = mask | itself[None, None]  # a query always sees itself (a padded one has nothing else)
        scores = (q.view(B, H, n, b, D) @ keys.transpose(-2, -1)) / math.sqrt(D)  # (B, H, n, b, keys)
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return (weights @ values).view(B, H, n * b, D)[:, :, :T]

    def _rule(self, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """The pattern inside gathered blocks: the window's band (Longformer) or whole blocks (BigBird), causal."""
        keep = torch.ones_like(query_pos - key_pos, dtype=torch.bool) if self.random_blocks else \
            (query_pos - key_pos).abs() < self.window
        return keep & (key_pos <= query_pos) if self.causal else keep
