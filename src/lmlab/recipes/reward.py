"""Reward modelling: a language model learns to score answers the way people rank them.

Read top to bottom: preferences (a JSONL file of prompt + chosen/rejected, or prompt + K ranked
answers; or the embedded addition task, K answers per question; `training.preference_data`) -> a
training and a held-out part -> the model with a PEFT method applied, and a scalar head read at the
last token (`heads.reward.RewardModel`) -> per prompt, every one of its K answers scored in one batch
(`training.preference.ranking_chats`) and all K-choose-2 (better, worse) pairs in the Bradley-Terry
loss, averaged over the pairs (InstructGPT; `training.reward_model.ranking_loss`) -> AdamW steps, checkpoints that resume exactly -> the backbone (adapter, or whole
model) and the head, which `models.tuned_files.load_reward_model` reads back (for PPO).
Held-out pairwise accuracy (the share of pairs ordered right) is measured before and after.
"""

from pathlib import Path

import torch

from lmlab.heads.reward import RewardModel
from lmlab.models.tuned_files import save_reward_head
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.loop import log_before, part_of, run_steps
from lmlab.training.post_train_config import TASK
from lmlab.training.post_training import (
    PostTrainConfig,
    PostTrainResult,
    batch_indices,
    finish,
    load_tunable,
    run_settings,
    split_examples,
    start_tuning,
)
from lmlab.training.preference import ranking_chats
from lmlab.training.preference_data import Ranking, load_rankings
from lmlab.training.reward_model import chat_rewards, ranking_loss


def reward(model: str | Path, data: str, out: str | Path, cfg: PostTrainConfig = PostTrainConfig(), k: int = 4,
           adapter: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
           device: str = "auto", show_progress: bool = True) -> PostTrainResult:
    """Train a reward model from `model` (a zoo name, model or run directory, .gguf) on the
    preferences in `data` (a JSONL file, or "task": `k` ranked answers per question) into the
    run directory `out`. `adapter`, `stop_after` and `resume` work as for `recipes.sft.sft`."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    rankings = load_rankings(data, cfg, k)
    train, val = split_examples(rankings, cfg.val_fraction, cfg.loop.seed)
    tuned = load_tunable(model, cfg, adapter, device)
    reward_model = RewardModel(tuned.model)  # the head's starting weights follow the seed, after PEFT's
    settings = run_settings("reward", tuned, data, rankings, cfg, adapter, k=k if data == TASK else None)
    session = start_tuning(out, reward_model, cfg, settings, ckpt)

    def batch_loss(rows: list[Ranking]) -> tuple[torch.Tensor, torch.Tensor]:  # all answers, one batch
        scores = chat_rewards(reward_model, tuned.tokenizer, ranking_chats(rows), cfg.block_size)  # (sum of K,)
        return ranking_loss(scores, [len(answers) for _, answers in rows])

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        indices = part_of(batch_indices(len(train), cfg.loop.batch_size, step, cfg.loop.seed), part, parts)
        loss, correct = batch_loss([train[i] for i in indices])
        return loss, {"accuracy": correct.mean().item()}

    def validate() -> dict:  # held-out loss per prompt, and accuracy over every held-out pair
        losses, correct = [], []
        for start in range(0, len(val), cfg.loop.batch_size):
            rows = val[start:start + cfg.loop.batch_size]
            loss, right = batch_loss(rows)
            losses.append(loss.item() * len(rows))
            correct.append(right)
        return {"val_loss": sum(losses) / len(val), "val_accuracy": torch.cat(correct).mean().item()} if val else {}

    log_before(session, validate)
    finished = run_steps(session, step_loss, validate, stop_after, show_progress, ylabel="Bradley-Terry loss")
    if finished and session.dist.is_main:
        save_reward_head(reward_model, out)
    return finish(session, tuned, finished, merge=False)
