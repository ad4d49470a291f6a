"""Cut a token array into blocks, split them into train / validation, and batch them by step.

A block is a window of block_size + 1 tokens starting at a multiple of block_size: inputs are its
first block_size tokens and targets its last block_size, and consecutive blocks share one boundary
token so no prediction is lost between them. Blocks are named by their start offsets.

Batches are a pure function of (blocks, batch size, step, seed): epoch e visits the training
blocks in a permutation seeded by (seed, e), epochs follow one another without a gap, and step k
takes the k-th run of batch_size offsets from that endless sequence. A run resumed at step k
therefore sees exactly the batches the uninterrupted run would have seen; the step is the whole
data position a checkpoint needs.
"""

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from lmlab.errors import LmlabError


@dataclass(frozen=True, eq=False)
class BlockSplit:
    """A token array cut into blocks, with the start offsets of training and validation blocks."""

    block_size: int
    tokens: np.ndarray  # (n_tokens,) uint16 or uint32, usually a read-only memmap
    train_blocks: np.ndarray  # (n_train,) int64 start offsets, ascending
    val_blocks: np.ndarray  # (n_val,) int64 start offsets, ascending, disjoint from train_blocks


def split_blocks(
    tokens: np.ndarray, block_size: int, val_fraction: float = 0.1, seed: int = 0
) -> BlockSplit:
    """Cut `tokens` into non-overlapping blocks and hold out a seeded random `val_fraction` of them.

    Any positive fraction holds out at least one block, and at least one block stays for training.
    """
    if block_size < 1:
        raise LmlabError(f"block size {block_size} must be at least 1")
    if not 0 <= val_fraction < 1:
        raise LmlabError(f"val_fraction {val_fraction} must be at least 0 and below 1")
    n_blocks = (len(tokens) - 1) // block_size  # block i covers tokens [i*bs, (i+1)*bs]
    if n_blocks < 2:
        raise LmlabError(
            f"corpus has {len(tokens)} tokens but block size {block_size} needs at least "
            f"{2 * block_size + 1} (two blocks); pass a smaller --block-size or more data"
        )
    n_val = 0 if val_fraction == 0 else min(max(1, round(n_blocks * val_fraction)), n_blocks - 1)
    order = np.random.default_rng(seed).permutation(n_blocks).astype(np.int64)  # (n_blocks,)
    return BlockSplit(
        block_size=block_size,
        tokens=tokens,
        train_blocks=np.sort(order[n_val:]) * block_size,  # (n_train,)
        val_blocks=np.sort(order[:n_val]) * block_size,  # (n_val,)
    )


def batch_starts(blocks: np.ndarray, batch_size: int, step: int, seed: int) -> np.ndarray:
    """The start offsets of the batch at global step `step`: a pure function, so resuming is exact.

    Positions step*batch_size .. step*batch_size + batch_size - 1 of the endless sequence of
    seeded epoch permutations; a batch may straddle an epoch boundary.
    """
    if len(blocks) == 0:
        raise LmlabError("there are no blocks to batch; pass more data or a smaller --block-size")
    if batch_size < 1:
        raise LmlabError(f"batch size {batch_size} must be at least 1")
    if step < 0:
        raise LmlabError(f"step {step} must be at least 0")
    positions = np.arange(step * batch_size, (step + 1) * batch_size)  # (B,)
    epochs, indices = np.divmod(positions, len(blocks))  # (B,), (B,)
    picked = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        here = epochs == epoch
        picked[here] = _epoch_order(len(blocks), seed, int(epoch))[indices[here]]
    return np.asarray(blocks)[picked]  # (B,)


@lru_cache(maxsize=2)
def _epoch_order(n_blocks: int, seed: int, epoch: int) -> np.ndarray:
    """The order in which epoch `epoch` visits `n_blocks` blocks (cached: many steps share it)."""
    order = np.random.default_rng([seed, epoch]).permutation(n_blocks)  # (n_blocks,)
    order.flags.writeable = False
    return order


def gather(tokens: np.ndarray, starts: np.ndarray, block_size: int) -> torch.Tensor:
    """The blocks at `starts` as a (B, block_size + 1) int64 tensor, copied out of `tokens`."""
    index = np.asarray(starts)[:, None] + np.arange(block_size + 1)  # (B, T + 1)
    return torch.from_numpy(np.asarray(tokens)[index].astype(np.int64))  # (B, T + 1)

