"""The grid of a scaling-law experiment: which model sizes train on how many tokens, within a time budget.

Sizes climb a ladder of decoder shapes whose non-embedding parameter counts N double from ~1.3e4 to
~6.3e6 (Kaplan et al. count N without the embeddings: with them the small models fall off every trend).
Token budgets double too, from D_0 = `min_steps` batches: run (i, j) trains size i on D_0 * 2^j tokens,
with a learning-rate schedule as long as the run (Chinchilla's lesson: a cosine cycle longer than the run
overstates the loss of short runs). Runs with i + j = k cost about the same compute C = 6 N D (N is
only about geometric, so within ~15%): those are the isoFLOP profile k. Only runs with a tokens-per-parameter
ratio D / N inside a band are kept, so each profile spans small models trained long to large
models trained short, and brackets the compute-optimal size in between.

The budget picks how many profiles: each run's time is estimated from a timed training step of its size
(`calibrate`), and whole profiles are added, cheapest first, while the estimate fits.
"""

import math
import time
from dataclasses import dataclass

import torch

from lmlab.config import ModelConfig, OptimConfig
from lmlab.errors import LmlabError
from lmlab.losses.linear_cross_entropy import CausalLMLoss
from lmlab.models import registry
from lmlab.modules.meta import on_meta
from lmlab.training.optim import build_optimizer

# (n_layers, d_model): non-embedding parameters from 888 to 6.3M, about doubling at each step (GPT-2 or Llama
# blocks, 16-wide heads; one head below d_model 32)
LADDER = ((1, 8), (1, 12), (1, 16), (1, 24), (1, 32), (2, 32), (2, 48), (2, 64), (4, 64), (4, 96), (4, 128),
          (5, 160), (6, 208), (8, 256))
EMBEDDINGS = ("token_embedding.weight", "positions.table.weight", "lm_head.weight")
RUN_OVERHEAD_S = 3.0  # per run: reading and hashing the corpus, building, saving, the held-out pass
TIMED_STEPS = 3


@dataclass(frozen=True)
class PlannedRun:
    """One point of the grid: size `size` of the ladder trained for `steps` steps (`tokens` tokens)."""

    name: str
    size: int  # index into LADDER
    n_layers: int
    d_model: int
    non_embedding: int  # N
    steps: int
    tokens: int  # D
    profile: int  # isoFLOP profile k = the size's place among the grid's sizes + the token index
    estimate_s: float

    @property
    def compute(self) -> float:
        """C = 6 N D: the forward and backward matrix products of N weights over D tokens."""
        return 6.0 * self.non_embedding * self.tokens


def ladder_config(base: ModelConfig, size: int, vocab_size: int, block_size: int) -> ModelConfig:
    """The base preset's family at ladder shape `size`: 16-wide heads, a 4x MLP (8/3x for SwiGLU)."""
    n_layers, d_model = LADDER[size]
    d_ff = 4 * d_model if base.ffn == "gelu" else (8 * d_model // 3 + 7) // 8 * 8
    return base.replace(n_layers=n_layers, d_model=d_model, n_heads=max(1, d_model // 16), n_kv_heads=None, d_ff=d_ff,
                        vocab_size=vocab_size, context_length=block_size, trained_context=None)


def non_embedding_parameters(cfg: ModelConfig) -> int:
    """N as Kaplan et al. count it: every weight but the token and position embeddings (and an untied head)."""
    with on_meta():
        model = registry.build(cfg)
    return sum(p.numel() for name, p in model.named_parameters() if name not in EMBEDDINGS)


def calibrate(base: ModelConfig, sizes: list[int], vocab_size: int, batch_size: int, block_size: int) -> list[float]:
    """Seconds per training step (forward, backward, AdamW) of the ladder shapes `sizes`, timed on random
    tokens after one warm-up step."""
    seconds = []
    for size in sizes:
        torch.manual_seed(0)
        model = registry.build(ladder_config(base, size, vocab_size, block_size))
        loss, optimizer = CausalLMLoss(model), build_optimizer(model, OptimConfig())
        batch = torch.randint(vocab_size, (batch_size, block_size + 1))  # (B, T + 1)
        for step in range(1 + TIMED_STEPS):
            if step == 1:
                start = time.perf_counter()
            loss(batch[:, :-1], batch[:, 1:]).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        seconds.append((time.perf_counter() - start) / TIMED_STEPS)
    return seconds


def plan_grid(base: ModelConfig, sizes: list[int], step_seconds: list[float], budget_s: float, vocab_size: int,
              batch_size: int, block_size: int, min_steps: int, ratio: tuple[float, float]) -> list[PlannedRun]:
    """The runs of every isoFLOP profile that fits `budget_s` (estimated), cheapest profile first.

    Run (i, j): the i-th of the ladder shapes `sizes` (which take `step_seconds` a step), min_steps * 2^j
    steps, kept when its tokens per parameter lie in `ratio`; profile k holds the runs with i + j = k."""
    counts = [non_embedding_parameters(ladder_config(base, size, vocab_size, block_size)) for size in sizes]
    tokens_per_step = batch_size * block_size
    runs: list[PlannedRun] = []
    for k in range(2 * len(LADDER) + 40):
        profile = []
        for i, (size, n) in enumerate(zip(sizes, counts)):
            steps = min_steps * 2 ** (k - i) if k >= i else 0
            if steps and ratio[0] <= steps * tokens_per_step / n <= ratio[1]:
                profile.append(PlannedRun(f"n{size}-d{k - i}", size, *LADDER[size], n, steps, steps * tokens_per_step,
                                          k, steps * step_seconds[i] + RUN_OVERHEAD_S))
        cost = sum(r.estimate_s for r in runs + profile)
        if cost > budget_s:
            if enough_for_fits(runs):
                return runs
            if enough_for_fits(runs + profile):
                raise LmlabError(f"a budget of {budget_s / 60:.2g} minutes fits too few runs on this machine "
                                 f"for the fits (5 runs, two isoFLOP profiles of 3); raise --budget-minutes to "
                                 f"at least {math.ceil(cost / 60)}")
        runs += profile
    if not enough_for_fits(runs):
        raise LmlabError("the ladder and --tokens-per-parameter leave too few runs for the fits; widen the ratio "
                         "band or raise --max-parameters")
    return runs


def enough_for_fits(runs: list[PlannedRun]) -> bool:
    """Chinchilla's law needs 5 runs, and the compute-optimal size's exponent two isoFLOP profiles of 3."""
    profiles = [sum(r.profile == k for r in runs) for k in {r.profile for r in runs}]
    return len(runs) >= 5 and sum(count >= 3 for count in profiles) >= 2

