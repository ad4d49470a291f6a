"""The training loop: every gradient-trained recipe steps through `run_steps`.

A recipe wires a network, a transformation of its data and a loss into one function,
`step_loss(step, part, parts) -> (loss, metrics)`: the loss of part `part` of `parts` equal parts
of the global batch of optimizer step `step`, a batch that depends on the step alone (so a resumed
run sees the same batches; `finetune.batch_indices`, `data.blocks.batch_starts`). The loop does
the rest, the same for all of them:

- AdamW and the schedule of the recipe's `OptimConfig`, gradient clipping;
- gradient accumulation (`grad_accum` parts per process) and data parallelism under torchrun
  (each process takes its parts; gradients are averaged, so every process takes the same step and
  the logged loss is the global batch's); with `fsdp` the weights, gradients and optimizer state
  are sharded over the processes instead of copied (`training.sharding`);
- bf16 autocast; evaluation every `eval_every` steps and at the end, in eval mode without gradients;
- a progress bar with ETA, metrics.jsonl and loss.png;
- checkpoints every `checkpoint_every` steps and when the session ends (at max_steps, after
  `stop_after` steps, on Ctrl-C, which finishes the step in flight first, or when the recipe's
  `stop()` says so), written atomically by the first process;
- exact resume: a checkpoint holds what training changes (the trainable parameters and buffers;
  a frozen base is read again from the base model), the optimizer, the schedule, the step, every
  RNG and the recipe's own `state` (an RNN's carried state, DPO's reference log-probabilities,
  early stopping's best score), plus the run's settings, so `--resume` continues the same run or
  refuses to.

A session without an output directory (`out=None`) trains in memory: no files, no checkpoints
(a probe fitted on the fly).
"""

import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lmlab.config import LOOP_DEFAULTS, LoopConfig, OptimConfig
from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_write_text
from lmlab.io.outputs import claim_run_dir
from lmlab.progress import progress_bar
from lmlab.training import distributed, sharding
from lmlab.training.checkpoint import checkpoint_file, save_checkpoint, set_rng_state, setting_differences, shards_of
from lmlab.training.interrupt import sigint_flag
from lmlab.training.memory import MemoryEstimate
from lmlab.training.optim import build_optimizer, build_schedule
from lmlab.training.progress import LOSS_CURVES, MetricsLog, save_loss_curve

# Settings a resumed run may change: they do not touch the weights. The base model is compared by
# its fingerprint, not by how it was named.
RESUMABLE = frozenset({"max_steps", "eval_every", "eval_batches", "checkpoint_every", "keep_checkpoints",
                       "log_every", "compile", "base_model", "max_memory"})

# What a loop setting was in a run saved before its recipe had it.


@dataclass
class Session:
    """One training session of a run: what trains, how, and how far it has got."""

    out: Path | None  # the run directory; None trains in memory
    module: nn.Module  # everything whose trainable parameters the optimizer steps
    loop: LoopConfig
    optim: OptimConfig
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    metrics: MetricsLog | None  # None on processes other than the first, and in memory
    step: int  # optimizer steps taken (the checkpoint's, when resuming)
    settings: dict  # what identifies the run (run.json)
    state: dict  # the recipe's own tensors and plain data to checkpoint
    resumed: bool
    dist: distributed.Dist

    @property
    def parts(self) -> int:
        """Into how many equal parts each step's global batch is cut (processes x grad_accum)."""
        return self.dist.world_size * self.loop.grad_accum


def start_session(out: Path | None, module: nn.Module, optim: OptimConfig, loop: LoopConfig, settings: dict,
                  ckpt: dict | None = None, resumable: frozenset[str] = frozenset(),
                  memory: MemoryEstimate | None = None) -> Session:
    """AdamW and the schedule over the trainable parameters of `module` (sharded first with
    `loop.fsdp`), restored from `ckpt` when resuming. A checkpoint from another run (other base
    model, data or settings; a setting named in `resumable` or RESUMABLE may change) is refused
    before anything is written; then the first process prints the `memory` estimate a process
    needs and (re)starts run.json and metrics.jsonl in `out`."""
    d = distributed.current()
    if loop.max_steps is None:
        raise LmlabError("the run's length is not set; pass --max-steps")
    if loop.batch_size % (d.world_size * loop.grad_accum):
        raise LmlabError(f"--batch-size {loop.batch_size} must be a multiple of the processes ({d.world_size}) "
                         f"x --grad-accum ({loop.grad_accum})")
    if ckpt is not None:
        check_same_run(ckpt, settings, out, RESUMABLE | resumable)
    if loop.fsdp:
        sharding.shard(module)
    optimizer = build_optimizer(module, optim)
    scheduler = build_schedule(optimizer, optim, loop.max_steps)
    step, state = 0, {}
    if ckpt is not None:
        if loop.fsdp:
            sharding.load_shards(module, optimizer, trainable_state(module), shards_of(ckpt.path),
                                 ckpt["param_groups"])
        else:
            load_trainable(module, ckpt["trainable"])
            optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"])
        step, state = ckpt["step"], ckpt["state"]
    if memory is not None and d.is_main:
        print(f"memory per process: {memory.describe()}", file=sys.stderr)
    metrics = None
    if out is not None and d.is_main:
        claim_run_dir(out)
        atomic_write_text(out / "run.json", json.dumps(settings, indent=2))
        metrics = MetricsLog(out / "metrics.jsonl", resume_step=step if ckpt is not None else None)
    d.barrier()
    return Session(out, module, loop, optim, optimizer, scheduler, metrics, step, settings, state,
                   ckpt is not None, d)


def check_same_run(ckpt: dict, settings: dict, out: Path | None, resumable: frozenset[str] = RESUMABLE) -> None:
    """Refuse to resume the checkpoint of a different run: first another recipe's, then one of a
    different base model (an adapter fits only its own), then any other setting that changes the weights. Settings nest
    (a config inside the settings); a setting is resumable by its own name."""
    saved = ckpt["settings"]
    if saved.get("recipe") != settings.get("recipe"):
        raise LmlabError(f"'{out}' holds a {saved.get('recipe')} run, not a {settings.get('recipe')} run; resume it "
                         "with the command that started it, or choose a new --out directory")
    if saved.get("base_fingerprint") != settings.get("base_fingerprint"):
        raise LmlabError(f"the run in '{out}' was trained on base model {saved.get('base_fingerprint')} "
                         f"({saved.get('base_model')}), not {settings.get('base_fingerprint')} "
                         f"({settings.get('base_model')}); resume with the --model it started from")
    saved, now = _flat(saved), _flat(settings)
    saved |= {key: LOOP_DEFAULTS[key.rsplit(".", 1)[-1]] for key in now
              if key not in saved and key.rsplit(".", 1)[-1] in LOOP_DEFAULTS}
    diffs = setting_differences(saved, now, {key for key in now if key.rsplit(".", 1)[-1] in resumable})
    if diffs:
        raise LmlabError(f"--resume with a different config ({'; '.join(diffs)}); rerun with the original "
                         "settings or start a new --out directory")


def _flat(settings: dict, prefix: str = "") -> dict:
    """Nested settings as one level, by dotted name: {"train": {"lr": 1}} -> {"train.lr": 1}. The
    loop's settings are named as if they were not nested ({"train": {"loop": {"max_steps": 5}}} ->
    {"train.max_steps": 5}), as a run saved before `LoopConfig` nested them wrote them: it resumes."""
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat |= _flat(value, prefix if key == "loop" else f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return flat


def trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """What training changes, by name: the parameters that train and the persistent buffers."""
    trains = {name for name, p in module.named_parameters() if p.requires_grad}
    buffers = {name for name, _ in module.named_buffers()}
    return {name: t.detach() for name, t in module.state_dict().items() if name in trains or name in buffers}


@torch.no_grad()
def load_trainable(module: nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Put a checkpoint's `trainable_state` back into `module`."""
    if trainable_state(module).keys() != saved.keys():
        raise LmlabError("the checkpoint's trained parameters do not fit this model; resume with the "
                         "settings the run started with")
    module.load_state_dict(saved, strict=False)


def checkpoint(session: Session) -> Path | None:
    """Write the session's checkpoint at its current step (keeping the newest `keep_checkpoints`):
    the first process writes it, the others wait; a sharded model's tensors are written beside it
    by every process (`sharding.save_shards`)."""
    if session.out is None:
        return None
    module, optimizer, directory = session.module, session.optimizer, session.out / "checkpoints"
    if session.loop.fsdp:
        shards = shards_of(checkpoint_file(directory, session.step))
        tensors = {"param_groups": sharding.save_shards(module, optimizer, trainable_state(module), shards,
                                                        session.dist.is_main)}
    else:
        tensors = {"trainable": trainable_state(module), "optimizer": optimizer.state_dict()}
    path = None
    if session.dist.is_main:
        path = save_checkpoint(directory, session.step, tensors | {
            "scheduler": session.scheduler.state_dict(), "settings": session.settings, "state": session.state,
        }, session.loop.keep_checkpoints)
    session.dist.barrier()
    return path


def evaluated(module: nn.Module, measure: Callable[[], dict], bf16: bool = False) -> dict:
    """`measure()` with `module` in eval mode and without gradients (autocast to bfloat16 with
    `bf16`); its mode is restored after, and a sharded model's weights are sharded again (they
    were gathered without gradients, and training must gather its own)."""
    training = module.training
    module.eval()
    try:
        with torch.no_grad(), _autocast(module, bf16):
            return measure()
    finally:
        module.train(training)
        sharding.reshard(module)


def log_before(session: Session, measure: Callable[[], dict], **extra) -> None:
    """Log the held-out metrics of `measure()` at step 0, before training, in a new run (a resumed one
    logged them when it started; one in memory logs nothing). Every process measures (a sharded model
    computes together); the first writes."""
    if not session.resumed and session.out is not None:
        measures = evaluated(session.module, measure, session.loop.bf16)
        if session.metrics is not None:
            session.metrics.write(step=0, **extra, **measures)


def run_steps(session: Session, step_loss: Callable[[int, int, int], tuple[torch.Tensor, dict]],
              evaluate: Callable[[], dict] | None = None, stop_after: int | None = None,
              show_progress: bool = True, curves: dict[str, str] = LOSS_CURVES, ylabel: str = "loss",
              throughput: tuple[str, float] | None = None, stop: Callable[[], bool] | None = None) -> bool:
    """Train from `session.step` to max_steps, or for `stop_after` steps, or until Ctrl-C or `stop()`.

    `step_loss(step, part, parts)` builds part `part` of `parts` of the batch of `step` and returns
    its mean loss (scalar, with gradient) and metrics to log (floats; averaged over the parts).
    `evaluate()` returns held-out metrics; it runs every `eval_every` steps and at max_steps, in
    eval mode, and may update `session.state` (early stopping), which `stop()` then reads.
    `throughput` ("tokens_per_s", tokens in a step) logs that rate. A checkpoint and loss.png
    (`curves`: legend name -> metric key) are written when the session ends. Returns True when
    training reached max_steps.
    """
    loop, module, d = session.loop, session.module, session.dist
    params = [p for p in module.parameters() if p.requires_grad]
    end = loop.max_steps if stop_after is None else min(loop.max_steps, session.step + stop_after)
    bar = progress_bar(loop.max_steps, session.step, desc=session.settings.get("recipe"),
                       disable=not (show_progress and d.is_main))
    module.train()
    stopped = False
    # The bar is closed on an error too, so that its last line comes before the error's.
    with sigint_flag() as interrupted, contextlib.closing(bar):
        while session.step < end and not stopped:
            t0 = time.perf_counter()
            logged = _accumulate(session, step_loss)
            if not loop.fsdp:  # FSDP averaged them in its reduce-scatter
                distributed.average_gradients(params, d)
            grad_norm = sharding.grad_norm(torch.nn.utils.clip_grad_norm_(params, session.optim.grad_clip))
            session.optimizer.step()
            session.optimizer.zero_grad(set_to_none=True)
            session.scheduler.step()
            session.step += 1
            step, seconds = session.step, time.perf_counter() - t0
            row = {"step": step} | logged | {"lr": session.scheduler.get_last_lr()[0], "grad_norm": grad_norm,
                                             "step_s": seconds}
            if throughput is not None:
                row[throughput[0]] = throughput[1] / seconds
            if evaluate is not None and (step % loop.eval_every == 0 or step == loop.max_steps):
                row |= evaluated(module, evaluate, loop.bf16)
            if session.metrics is not None and (step % loop.log_every == 0 or step == end
                                                or any(key.startswith(("val_", "eval_")) for key in row)):
                session.metrics.write(**row)
            bar.set_postfix(loss=f"{row['loss']:.3f}", refresh=False)
            bar.update(1)
            stopped = distributed.any_process(interrupted() or (stop is not None and stop()), d)
            if step % loop.checkpoint_every == 0 and step < end and not stopped:
                checkpoint(session)
    checkpoint(session)
    if session.metrics is not None:
        save_loss_curve(session.metrics.read(), session.out / "loss.png", curves, ylabel)
    return session.step >= loop.max_steps


def _accumulate(session: Session, step_loss: Callable[[int, int, int], tuple[torch.Tensor, dict]]) -> dict:
    """Backward through this process's parts of the step's batch (grad_accum of them), each loss
    scaled so the gradients sum to the mean's; the metrics averaged over all parts of all processes."""
    accum, parts = session.loop.grad_accum, session.parts
    totals: dict[str, float] = {}
    for micro in range(accum):
        with _autocast(session.module, session.loop.bf16):
            loss, logged = step_loss(session.step, session.dist.rank * accum + micro, parts)
        (loss / accum).backward()
        for key, value in ({"loss": loss.item()} | logged).items():
            totals[key] = totals.get(key, 0.0) + value / accum
    return distributed.mean_over_processes(totals, session.dist)


def _autocast(module: nn.Module, bf16: bool):
    if not bf16:
        return contextlib.nullcontext()
    device = next(module.parameters()).device
    return torch.autocast(device.type, dtype=torch.bfloat16)


def part_of(items, part: int, parts: int):
    """Part `part` of `parts` equal contiguous parts of a step's batch `items` (a list, array or
    tensor whose length `start_session` checked is divisible)."""
    size = len(items) // parts
    return items[part * size:(part + 1) * size]


def last_evaluation(session: Session) -> dict:
    """The held-out metrics of the run's latest evaluation (every val_/eval_ metric of the last row
    that has one), {} before any or on processes other than the first."""
    rows = session.metrics.read() if session.metrics is not None else []
    return next(({key: value for key, value in row.items() if key.startswith(("val_", "eval_"))}
                 for row in reversed(rows) if any(key.startswith(("val_", "eval_")) for key in row)), {})


def measured(session: Session) -> tuple[dict, dict]:
    """The held-out metrics logged before training (step 0) and at the session's last step:
    every metric whose name starts with val_, eval_ or task_."""
    rows = session.metrics.read() if session.metrics is not None else []

    def at(step: int) -> dict:
        return {key: value for row in rows if row["step"] == step
                for key, value in row.items() if key.startswith(("val_", "eval_", "task_"))}
    return at(0), at(session.step)
