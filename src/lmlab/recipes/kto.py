"""Kahneman-Tversky Optimization: a policy learns from answers labelled good or bad one at a time, with
no pairs.

Read top to bottom: labelled answers (a JSONL file of {"prompt", "completion", "label"}, TRL's unpaired
format, or the embedded task's pairs taken apart: `training.preference_data.load_unpaired`) -> a training
and a held-out part -> each answer beside a mismatched one, its prompt followed by the previous example's
answer: their log-ratios estimate KTO's reference point KL(pi || pi_ref), as in the paper and TRL (which
rotate the answers by one within each batch; here the partner is fixed per example, so the reference's
log-probs of both are computed once when they cannot come from the adapters-off network) -> the model with
a PEFT method applied -> per example, log p(answer | prompt) of its answer and of the mismatched one
under the policy and the reference (an (answer, mismatched) row is scored as DPO scores a (chosen,
rejected) pair: `training.preference`) -> the KTO loss (`losses.kto`) -> AdamW steps, checkpoints that
resume exactly -> the adapter (for LoRA also the merged model) or the whole model.

Logged: the reference point z0 (kl), and the share of answers on their side of it (accuracy: desirable
answers' implicit reward above z0, undesirable ones' below), which should grow; on the task, the reward
of greedy replies to held-out questions before and after.
"""
import dataclasses
from pathlib import Path

import torch

from lmlab.losses.kto import kto_loss
from lmlab.training.alignment_configs import KTOConfig
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.loop import log_before, part_of, run_steps
from lmlab.training.post_train_config import TASK
from lmlab.training.post_training import (
    PostTrainConfig,
    PostTrainResult,
    batch_indices,
    finish,
    held_out_means,
    load_tunable,
    run_settings,
    split_examples,
    start_tuning,
    unique,
)
from lmlab.training.preference import pair_logprobs, pair_reference
from lmlab.training.preference_data import Pair, Unpaired, load_unpaired
from lmlab.training.task_score import task_score


def kto(model: str | Path, data: str, out: str | Path, cfg: PostTrainConfig = PostTrainConfig(),
        kto_cfg: KTOConfig = KTOConfig(), adapter: str | Path | None = None, resume: bool = False,
        stop_after: int | None = None, device: str = "auto", show_progress: bool = True) -> PostTrainResult:
    """Align `model` (a zoo name, model or run directory, .gguf) with the labelled answers in `data` (a
    JSONL file, or "task") into the run directory `out`. `adapter`, `stop_after` and `resume` work as
    for `recipes.sft.sft`."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    train, val = split_examples(load_unpaired(data, cfg), cfg.val_fraction, cfg.loop.seed)
    tuned = load_tunable(model, cfg, adapter, device)
    settings = run_settings("kto", tuned, data, train + val, cfg, adapter, **dataclasses.asdict(kto_cfg))
    session = start_tuning(out, tuned.model, cfg, settings, ckpt)
    splits = {"train": mismatched(train), "val": mismatched(val)}
    desirable = {"train": labels(train), "val": labels(val)}
    reference = pair_reference(session, tuned, adapter, splits, cfg.block_size, cfg.loop.batch_size)
    prompts = unique([prompt for prompt, _, _ in val])[:cfg.task_eval_size] if data == TASK else []

    def examples_loss(part: str, indices: list[int]) -> tuple[torch.Tensor, dict]:
        """The KTO loss of examples `indices` of part train or val, and what it logs."""
        rows = [splits[part][i] for i in indices]
        policy = pair_logprobs(tuned.model, tuned.tokenizer, rows, cfg.block_size, tuned.device)  # (B, 2)
        return kto_batch_loss(policy, reference(part, indices), desirable[part][indices].to(tuned.device), kto_cfg)

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        return examples_loss("train", part_of(batch_indices(len(train), cfg.loop.batch_size, step, cfg.loop.seed),
                                              part, parts))

    def validate() -> dict:  # held-out loss, reference point and accuracy, averaged over the examples
        return held_out_means(lambda indices: examples_loss("val", indices), len(val), cfg.loop.batch_size)

    def graded() -> dict:
        return task_score(tuned.model, tuned.tokenizer, prompts) if prompts else {}

    log_before(session, lambda: validate() | graded())
    finished = run_steps(session, step_loss, validate, stop_after, show_progress, ylabel="KTO loss")
    return finish(session, tuned, finished, graded)


def mismatched(examples: list[Unpaired]) -> list[Pair]:
    """Each example's prompt with its own answer and with the previous example's (the first takes the
    last's): rows scored as pairs, (B, 2) = (the answer's log-prob, the mismatched one's)."""
    return [(prompt, answer, examples[i - 1][1]) for i, (prompt, answer, _) in enumerate(examples)]


def labels(examples: list[Unpaired]) -> torch.Tensor:
    """Whether each example's answer is desirable: (N,) bool."""
    return torch.tensor([desirable for _, _, desirable in examples], dtype=torch.bool)


def kto_batch_loss(policy: torch.Tensor, reference: torch.Tensor, desirable: torch.Tensor,
                   kto_cfg: KTOConfig) -> tuple[torch.Tensor, dict]:
    """The KTO loss of a batch from the policy's and the reference's log-probs, each (B, 2) (the answer,
    the mismatched answer), and what is logged: the reference point z0 and the share of answers on
    their side of it."""
    loss, rewards, kl = kto_loss(policy[:, 0], reference[:, 0], desirable, policy[:, 1].detach(), reference[:, 1],
                                 kto_cfg.beta, kto_cfg.desirable_weight, kto_cfg.undesirable_weight)
    right_side = torch.where(desirable, rewards > kto_cfg.beta * kl, rewards < kto_cfg.beta * kl)
    return loss, {"kl": kl.item(), "accuracy": right_side.float().mean().item()}
