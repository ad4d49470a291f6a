"""Direct Preference Optimization: a policy learns from preference pairs, with no reward model.

Read top to bottom: preferences (a JSONL file of prompt + chosen/rejected, or prompt + ranked
answers, which become all their pairs; or the embedded addition task; or, with `sample_pairs`,
the best and worst of K replies the model itself samples for each prompt, graded by a reward
function: on-policy pairs; `training.preference_data`) -> a training and a held-out part -> the
model with a PEFT method applied -> per pair, log p(answer | prompt) of the chosen and the
rejected answer under the policy and under the reference (the model as training starts;
`training.preference`) -> the loss `dpo_cfg.loss` names: DPO's sigmoid, or one of its successors
(cDPO, robust DPO, IPO, SimPO, ORPO: `losses.dpo.preference_loss`) -> AdamW steps, checkpoints that
resume exactly -> the adapter (for LoRA also the merged model) or the whole model.

The reference costs no second model: with a fresh adapter it is the same network with its
adapters switched off (`adapters_disabled`). Without PEFT (or when continuing a saved adapter)
the starting weights are gone once training moves them, so the reference log-probabilities of
every pair are computed once, before the first step, and kept in the checkpoints. SimPO and ORPO
need no reference: none is built and no reference log-probability is computed.

Logged: the implicit rewards' margin beta * (log-ratio chosen - log-ratio rejected), which should
grow, and the share of pairs it orders right; on the task, the reward of greedy replies to
held-out questions before and after.
"""
import dataclasses
from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.losses.bradley_terry import pairwise_accuracy
from lmlab.losses.dpo import REFERENCE_FREE, preference_loss
from lmlab.training.alignment_configs import DPOConfig
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.loop import log_before, part_of, run_steps
from lmlab.training.post_train_config import TASK
from lmlab.training.post_training import (
    PostTrainConfig,
    PostTrainResult,
    Tunable,
    batch_indices,
    finish,
    held_out_means,
    load_tunable,
    run_settings,
    split_examples,
    start_tuning,
    unique,
)
from lmlab.training.preference import pair_lengths, pair_logprobs, pair_reference
from lmlab.training.preference_data import Pair, load_pairs, sampled_pairs
from lmlab.training.rewards import RewardFn, prompts_and_replies, reward_source
from lmlab.training.task_score import task_score


def dpo(model: str | Path, data: str, out: str | Path, cfg: PostTrainConfig = PostTrainConfig(),
        dpo_cfg: DPOConfig = DPOConfig(), reward_fn: str | None = None, reward_model: str | Path | None = None,
        adapter: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
        device: str = "auto", show_progress: bool = True) -> PostTrainResult:
    """Align `model` (a zoo name, model or run directory, .gguf) with the preferences in `data` (a
    JSONL file, or "task") into the run directory `out`; `dpo_cfg.beta` scales the implicit reward
    (larger: stay closer to the reference). With `dpo_cfg.sample_pairs` = K, `data` holds prompts
    instead (as for PPO) and the pairs are made from K replies the model samples for each, graded by
    `reward_fn` or `reward_model` (on the task, its own reward). `adapter`, `stop_after` and `resume`
    work as for `recipes.sft.sft`."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    if dpo_cfg.sample_pairs:
        rows = prompts_and_replies(data, cfg)
        score = reward_source(data, reward_fn, reward_model, cfg.block_size)
        train_rows, val_rows = split_examples(rows, cfg.val_fraction, cfg.loop.seed)
        tuned = load_tunable(model, cfg, adapter, device)
        train, val = (sampled_part(tuned, part, score, dpo_cfg, cfg.loop.seed + i, show_progress)
                      for i, part in enumerate((train_rows, val_rows)))
        if not train:
            raise LmlabError(f"none of the {dpo_cfg.sample_pairs} replies sampled per prompt differ in reward, so "
                             "there are no pairs; sample more replies (--sample-pairs) or use more prompts")
        val_prompts = [prompt for prompt, _ in val_rows]
    else:
        train, val = split_examples(load_pairs(data, cfg), cfg.val_fraction, cfg.loop.seed)
        val_prompts = unique([prompt for prompt, _, _ in val])
        tuned = load_tunable(model, cfg, adapter, device)
    settings = run_settings("dpo", tuned, data, train + val, cfg, adapter, **dataclasses.asdict(dpo_cfg),
                            reward_fn=reward_fn, reward_model=str(reward_model) if reward_model else None)
    session = start_tuning(out, tuned.model, cfg, settings, ckpt)
    splits = {"train": train, "val": val}
    reference = None if dpo_cfg.loss in REFERENCE_FREE else pair_reference(session, tuned, adapter, splits,
                                                                            cfg.block_size, cfg.loop.batch_size)
    prompts = val_prompts[:cfg.task_eval_size] if data == TASK else []

    def pairs_loss(part: str, indices: list[int]) -> tuple[torch.Tensor, dict]:
        """The loss of pairs `indices` of part train or val, and what it logs."""
        pairs = [splits[part][i] for i in indices]
        policy = pair_logprobs(tuned.model, tuned.tokenizer, pairs, cfg.block_size, tuned.device)  # (B, 2)
        lengths = pair_lengths(tuned.tokenizer, pairs, cfg.block_size).to(tuned.device)  # (B, 2)
        return dpo_pairs_loss(policy, lengths, reference(part, indices) if reference else None, dpo_cfg)

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        return pairs_loss("train", part_of(batch_indices(len(train), cfg.loop.batch_size, step, cfg.loop.seed),
                                           part, parts))

    def validate() -> dict:  # held-out loss, margin and accuracy, averaged over the pairs
        return held_out_means(lambda indices: pairs_loss("val", indices), len(val), cfg.loop.batch_size)

    def graded() -> dict:
        return task_score(tuned.model, tuned.tokenizer, prompts) if prompts else {}

    log_before(session, lambda: validate() | graded())
    finished = run_steps(session, step_loss, validate, stop_after, show_progress, ylabel="DPO loss")
    return finish(session, tuned, finished, graded)


def dpo_pairs_loss(policy: torch.Tensor, lengths: torch.Tensor, reference: torch.Tensor | None,
                   dpo_cfg: DPOConfig) -> tuple[torch.Tensor, dict]:
    """The loss `dpo_cfg.loss` of a batch of pairs from the policy's log-probs, the answers' token counts
    and the reference's log-probs (None for SimPO and ORPO), each (B, 2) (chosen, rejected), and what is
    logged: the implicit rewards' mean margin, which should grow, and the share of pairs they order right."""
    loss, chosen, rejected = preference_loss(dpo_cfg.loss, policy, lengths, reference, dpo_cfg.beta,
                                             dpo_cfg.label_smoothing, dpo_cfg.simpo_gamma)
    margin, accuracy = (chosen - rejected).mean(), pairwise_accuracy(chosen, rejected)
    return loss, {"margin": margin.item(), "accuracy": accuracy.item()}


def sampled_part(tuned: Tunable, rows: list[tuple[list[dict], str | None]], score: RewardFn, dpo_cfg: DPOConfig,
                 seed: int, show_progress: bool) -> list[Pair]:
    """The on-policy pairs of one part's (prompt, the data's reply) rows (`sampled_pairs`), sampled
    and graded as `dpo_cfg` says."""
    return sampled_pairs(tuned.model, tuned.tokenizer, [prompt for prompt, _ in rows], score, dpo_cfg.sample_pairs,
                         dpo_cfg.sample_max_new_tokens, dpo_cfg.sample_temperature, seed=seed,
                         references=[reply for _, reply in rows] if dpo_cfg.sample_with_reference else None,
                         show_progress=show_progress)
