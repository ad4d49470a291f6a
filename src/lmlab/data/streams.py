"""Parallel contiguous token streams, for truncated backpropagation through time (TBPTT).

A recurrent model carries its state from one batch to the next, so row b of batch k + 1 must
continue row b of batch k. The training tokens are laid end to end and cut into B streams of
equal length (B = batch size); batch k is the k-th chunk of block_size columns of all of them.
An epoch is one pass over the chunks; the next epoch starts the streams (and the state) afresh.

The tokens come from the training blocks of `lmlab.data.blocks.split_blocks`, so these models
hold out the same validation blocks as a transformer trained with the same block size and seed.
Every (input, target) pair is one of a block's, so a held-out block leaves no pair across its gap.
Batches are a pure function of the step, so a checkpoint needs the step and the carried state.
"""

from dataclasses import dataclass

import numpy as np
import torch

from lmlab.errors import LmlabError


@dataclass(frozen=True, eq=False)
class Streams:
    inputs: np.ndarray  # (B, n) token ids, row b is stream b
    targets: np.ndarray  # (B, n) the token after each input
    chunk_size: int  # columns per batch (the TBPTT truncation length)

    @property
    def chunks_per_epoch(self) -> int:
        return self.inputs.shape[1] // self.chunk_size

    def starts_epoch(self, step: int) -> bool:
        """True when the batch at `step` is the first of an epoch: the carried state starts again."""
        return step % self.chunks_per_epoch == 0

    def chunk(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of the batch at global step `step`, each (B, chunk_size) int64."""
        k = step % self.chunks_per_epoch
        columns = slice(k * self.chunk_size, (k + 1) * self.chunk_size)
        return (torch.from_numpy(self.inputs[:, columns].astype(np.int64)),
                torch.from_numpy(self.targets[:, columns].astype(np.int64)))


def parallel_streams(tokens: np.ndarray, block_starts: np.ndarray, block_size: int, n_streams: int) -> Streams:
    """The (input, target) pairs of the blocks at `block_starts`, in order, as `n_streams` streams
    read `block_size` tokens at a time; the few pairs that do not fill a whole stream are dropped."""
    if n_streams < 1:
        raise LmlabError(f"batch size {n_streams} must be at least 1")
    index = (np.sort(np.asarray(block_starts))[:, None] + np.arange(block_size)).reshape(-1)  # (N * T,)
    per_stream = len(index) // n_streams
    if per_stream < block_size:
        raise LmlabError(f"{len(index)} training tokens cannot fill {n_streams} streams of at least {block_size} "
                         "tokens; lower --batch-size or --block-size, or pass more data")
    index = index[: per_stream * n_streams].reshape(n_streams, per_stream)  # (B, n)
    tokens = np.asarray(tokens)
    return Streams(inputs=tokens[index], targets=tokens[index + 1], chunk_size=block_size)
