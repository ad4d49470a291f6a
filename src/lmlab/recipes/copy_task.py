"""Training a decoder on the copy task (`lmlab.data.copy_task`): can its attention reach back half a sequence?

Read top to bottom: a decoder whose vocabulary is the task's symbols and separator -> a batch of random strings
and their copies per step -> the next-token loss on the copy only (`CausalLMLoss`) -> the training loop ->
held-out accuracy (greedy, teacher-forced: the share of copied symbols predicted right) on strings no
training step saw. The run directory holds what every run's does (run.json, metrics.jsonl, loss.png,
checkpoints); the trained weights are only a means to the accuracy, so no model directory is saved.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from lmlab.config import LoopConfig, ModelConfig, OptimConfig, config_to_dict
from lmlab.config_checks import MAX_CONTEXT, at_least, at_most, check_types
from lmlab.data.copy_task import copy_accuracy, copy_batch
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.losses.linear_cross_entropy import CausalLMLoss
from lmlab.models import registry
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.device import training_device
from lmlab.training.loop import last_evaluation, part_of, run_steps, start_session


@dataclass(frozen=True)
class CopyTaskConfig:
    """The task (sequence length, alphabet) and the training budget."""

    length: int = 1024  # tokens per sequence: the copy is length / 2 + 1 tokens after its source
    symbols: int = 32  # alphabet size: chance is 1 / symbols
    # evaluation, checkpoints and logs come at fixed shares of max_steps (`train_copy`)
    loop: LoopConfig = LoopConfig(max_steps=300, batch_size=4)
    optim: OptimConfig = OptimConfig(lr=2e-3, warmup_steps=30)
    eval_batches: int = 4  # held-out batches of batch_size strings

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "eval_batches")
        at_least(self, 2, "symbols")
        at_least(self, 4, "length")
        at_most(self, MAX_CONTEXT, "length")


def train_copy(model_cfg: ModelConfig, cfg: CopyTaskConfig, out: str | Path, device: str = "auto",
               show_progress: bool = True) -> dict:
    """Train a decoder shaped as `model_cfg` (its vocabulary and context set by the task) on the copy task
    in the new run directory `out`; returns the last held-out measures: val_loss and val_copy_accuracy."""
    out = Path(out)
    resume_checkpoint(out, resume=False)  # refuses a directory that holds a run
    dev = training_device(device)
    model_cfg = model_cfg.replace(vocab_size=cfg.symbols + 1, context_length=cfg.length)
    settings = {"recipe": "copy_task", "model": config_to_dict(model_cfg), "task": dataclasses.asdict(cfg)}
    torch.manual_seed(cfg.loop.seed)
    model = registry.build(model_cfg).to(dev)
    steps = cfg.loop.max_steps
    loop = cfg.loop.replace(eval_every=max(1, steps // 6), checkpoint_every=steps, keep_checkpoints=1,
                            log_every=max(1, steps // 30))
    session = start_session(out, model, cfg.optim, loop, settings)
    head_loss = CausalLMLoss(model)

    def batch(step: int, held_out: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = copy_batch(cfg.loop.batch_size, cfg.length, cfg.symbols, cfg.loop.seed, step, held_out)
        return inputs.to(dev), targets.to(dev)  # (B, length) each

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        inputs, targets = batch(step)
        return head_loss(part_of(inputs, part, parts), part_of(targets, part, parts)), {}

    def evaluate() -> dict:
        loss = right = scored = 0
        for i in range(cfg.eval_batches):
            inputs, targets = batch(i, held_out=True)
            logits = model(inputs)  # (B, length, symbols + 1)
            loss += cross_entropy(logits, targets).item()  # over the copy only
            counts = copy_accuracy(logits, targets)
            right, scored = right + counts[0], scored + counts[1]
        return {"val_loss": loss / cfg.eval_batches, "val_copy_accuracy": right / scored}

    run_steps(session, step_loss, evaluate, show_progress=show_progress,
              throughput=("tokens_per_s", cfg.loop.batch_size * cfg.length))
    return last_evaluation(session)
