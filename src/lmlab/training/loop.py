"""The fine-tuning loop: optimizer steps over a recipe's loss, checkpoints that resume exactly.

A recipe gives `run_steps` a function step -> (loss, metrics) whose batch depends on the step
alone (`finetune.batch_indices`), and optionally an evaluation. The loop does the rest: backward,
gradient clipping, AdamW and the schedule, a progress bar with ETA, metrics.jsonl, loss.png,
a checkpoint every `checkpoint_every` steps and when it stops (after `stop_after` steps this
session, at max_steps, or on Ctrl-C, which finishes the step in flight first).

A checkpoint holds only what training changes: the trainable parameters (the frozen base is
read again from the base model), optimizer, scheduler, step, every RNG, and the recipe's own
`state` (DPO keeps its precomputed reference log-probabilities there), plus the run's settings,
so that `--resume` continues the same run or refuses.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_write_text
from lmlab.modules.peft import describe, trainable_parameters
from lmlab.training.checkpoint import save_checkpoint, set_rng_state, setting_differences
from lmlab.training.finetune import FinetuneConfig, Tunable, save_tuned
from lmlab.training.interrupt import sigint_flag
from lmlab.training.optim import build_optimizer, lr_multiplier
from lmlab.progress import progress_bar
from lmlab.training.progress import LOSS_CURVES, MetricsLog, save_loss_curve

# Settings a resumed run may change: they do not touch the weights. The base model is compared by
# its fingerprint, not by how it was named.
RESUMABLE = frozenset({"max_steps", "eval_every", "checkpoint_every", "keep_checkpoints", "log_every", "base_model"})


@dataclass(frozen=True)
class FinetuneResult:
    """How a fine-tuning session ended, and what it saved."""

    step: int
    finished: bool  # False when it stopped early (stop_after, Ctrl-C): resume to finish
    model_dir: Path | None  # a full model directory: peft none, or LoRA merged
    adapter_dir: Path | None  # the trained PEFT parameters; run.json names their base model
    before: dict  # held-out metrics before training (val_*, task_*)
    after: dict  # held-out metrics at the last step
    trainable: str  # "trainable 0.6M of 135.2M (0.48%)"


@dataclass
class Session:
    """One training session of a run: what trains, how, and how far it has got."""

    out: Path
    module: nn.Module  # what trains: a decoder with PEFT applied, or a reward model around one
    cfg: FinetuneConfig
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    metrics: MetricsLog
    step: int  # optimizer steps taken (the checkpoint's, when resuming)
    settings: dict  # what identifies the run (run.json)
    state: dict  # the recipe's own tensors to checkpoint
    resumed: bool


def start_session(out: Path, module: nn.Module, cfg: FinetuneConfig, settings: dict, ckpt: dict | None) -> Session:
    """AdamW and the schedule over the trainable parameters of `module`, restored from `ckpt` when
    resuming. A checkpoint from another run (other base model, data or settings) is refused before
    anything is written; then run.json and metrics.jsonl are (re)started in `out`."""
    if ckpt is not None:
        check_same_run(ckpt, settings, out)
    optimizer = build_optimizer(module, cfg.lr, cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_multiplier(
        s, cfg.warmup_steps, cfg.max_steps, cfg.schedule, cfg.min_lr_ratio))
    step, state = 0, {}
    if ckpt is not None:
        load_trainable(module, ckpt["trainable"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"])
        step, state = ckpt["step"], ckpt["state"]
    atomic_write_text(out / "run.json", json.dumps(settings, indent=2))
    metrics = MetricsLog(out / "metrics.jsonl", resume_step=step if ckpt is not None else None)
    return Session(out, module, cfg, optimizer, scheduler, metrics, step, settings, state, ckpt is not None)


def check_same_run(ckpt: dict, settings: dict, out: Path) -> None:
    """Refuse to resume the checkpoint of a different run: first a different base model (an
    adapter fits only its own), then any other setting that changes the weights."""
    saved = ckpt["settings"]
    if saved["base_fingerprint"] != settings["base_fingerprint"]:
        raise LmlabError(f"the run in '{out}' was trained on base model {saved['base_fingerprint']} "
                         f"({saved['base_model']}), not {settings['base_fingerprint']} ({settings['base_model']}); "
                         "resume with the --model it started from")
    diffs = setting_differences(saved, settings, RESUMABLE)
    if diffs:
        raise LmlabError(f"--resume with a different config ({'; '.join(diffs)}); rerun with the original "
                         "settings or start a new --out directory")


def trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that train, by name: all a checkpoint needs of the model."""
    return {name: p.detach() for name, p in module.named_parameters() if p.requires_grad}


@torch.no_grad()
def load_trainable(module: nn.Module, saved: dict[str, torch.Tensor]) -> None:
    params = {name: p for name, p in module.named_parameters() if p.requires_grad}
    if params.keys() != saved.keys():
        raise LmlabError("the checkpoint's trained parameters do not fit this model; resume with the "
                         "settings the run started with")
    for name, p in params.items():
        p.copy_(saved[name])


def checkpoint(session: Session) -> Path:
    """Write the session's checkpoint at its current step (keeping the newest `keep_checkpoints`)."""
    return save_checkpoint(session.out / "checkpoints", session.step, {
        "trainable": trainable_state(session.module), "optimizer": session.optimizer.state_dict(),
        "scheduler": session.scheduler.state_dict(), "settings": session.settings, "state": session.state,
    }, session.cfg.keep_checkpoints)


def evaluated(module: nn.Module, measure: Callable[[], dict]) -> dict:
    """`measure()` with `module` in eval mode and without gradients; its mode is restored after."""
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            return measure()
    finally:
        module.train(training)


def run_steps(session: Session, step_loss: Callable[[int], tuple[torch.Tensor, dict]],
              evaluate: Callable[[], dict] | None = None, stop_after: int | None = None,
              show_progress: bool = True, curves: dict[str, str] = LOSS_CURVES, ylabel: str = "loss") -> bool:
    """Train from `session.step` to max_steps, or for `stop_after` steps, or until Ctrl-C.

    `step_loss(step)` builds the batch of `step` and returns its loss (scalar, with gradient) and
    metrics to log (floats). `evaluate()` returns held-out metrics; it runs every `eval_every`
    steps and at max_steps, in eval mode. A checkpoint and loss.png (`curves`: legend name ->
    metric key) are written when the session ends. Returns True when training reached max_steps.
    """
    cfg, module = session.cfg, session.module
    params = trainable_parameters(module)
    end = cfg.max_steps if stop_after is None else min(cfg.max_steps, session.step + stop_after)
    bar = progress_bar(cfg.max_steps, session.step, desc=session.settings["recipe"], disable=not show_progress)
    module.train()
    with sigint_flag() as interrupted:
        while session.step < end and not interrupted():
            t0 = time.perf_counter()
            loss, logged = step_loss(session.step)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip).item()
            session.optimizer.step()
            session.optimizer.zero_grad(set_to_none=True)
            session.scheduler.step()
            session.step += 1
            step = session.step
            row = {"step": step, "loss": loss.item(), "lr": session.scheduler.get_last_lr()[0],
                   "grad_norm": grad_norm, "step_s": time.perf_counter() - t0} | logged
            evaluating = evaluate is not None and (step % cfg.eval_every == 0 or step == cfg.max_steps)
            if evaluating:
                row |= evaluated(module, evaluate)
            if step % cfg.log_every == 0 or evaluating or step == end:
                session.metrics.write(**row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", refresh=False)
            bar.update(1)
            if step % cfg.checkpoint_every == 0 and step < end:
                checkpoint(session)
    bar.close()
    checkpoint(session)
    save_loss_curve(session.metrics.read(), session.out / "loss.png", curves, ylabel)
    return session.step >= cfg.max_steps


def measured(session: Session) -> tuple[dict, dict]:
    """The held-out metrics logged before training (step 0) and at the session's last step:
    every metric whose name starts with val_ or task_."""
    def at(step: int) -> dict:
        return {key: value for row in session.metrics.read() if row["step"] == step
                for key, value in row.items() if key.startswith(("val_", "task_"))}
    return at(0), at(session.step)


def finish(session: Session, tuned: Tunable, finished: bool, after: Callable[[], dict] | None = None,
           merge: bool = True) -> FinetuneResult:
    """The end of a recipe: once training is done, save the model (`save_tuned`; `merge` a LoRA
    into a full model too) and log the held-out measures of `after()` at the last step."""
    model_dir = adapter_dir = None
    if finished:
        model_dir, adapter_dir = save_tuned(tuned, session.out, merge)
        if after is not None:
            session.metrics.write(step=session.step, **evaluated(session.module, after))
    before, last = measured(session)
    return FinetuneResult(session.step, finished, model_dir, adapter_dir, before, last, describe(session.module))
