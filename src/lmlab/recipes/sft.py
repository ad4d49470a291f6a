"""Supervised fine-tuning (instruction tuning): a trained model learns to reply as the chats show.

Read top to bottom: chats (a JSONL file of {"messages": [...]}, or the embedded addition task)
-> a training and a held-out part -> the model with a PEFT method applied -> batches of chats in
the model's chat template, with the loss on the assistant's tokens only (`objectives.sft`;
`pack` puts several chats in one row) -> AdamW steps, checkpoints that resume exactly -> the
adapter (for LoRA also the merged model) or the whole model. On the task, the held-out
questions are answered greedily and graded before and after training.
"""

from pathlib import Path

import torch

from lmlab.data.tasks import task_examples
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.objectives.sft import sft_batch
from lmlab.targets import IGNORE_INDEX
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.loop import log_before, part_of, run_steps
from lmlab.training.post_train_config import TASK
from lmlab.training.post_training import (
    PostTrainConfig,
    PostTrainResult,
    batch_indices,
    finish,
    load_tunable,
    read_chats,
    run_settings,
    split_examples,
    start_tuning,
    trim_padding,
    unique,
)
from lmlab.training.task_score import task_score


def sft(model: str | Path, data: str, out: str | Path, cfg: PostTrainConfig = PostTrainConfig(), pack: bool = False,
        adapter: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
        device: str = "auto", show_progress: bool = True) -> PostTrainResult:
    """Fine-tune `model` (a zoo name, model or run directory, .gguf) on the chats in `data` (a JSONL
    file, or "task") into the run directory `out`. `adapter` continues training a saved adapter;
    `stop_after` ends this session after that many steps with a checkpoint (so does Ctrl-C), and
    `resume=True` continues it."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    chats = load_chats(data, cfg)
    train, val = split_examples(chats, cfg.val_fraction, cfg.loop.seed)
    tuned = load_tunable(model, cfg, adapter, device)
    session = start_tuning(out, tuned.model, cfg, run_settings("sft", tuned, data, chats, cfg, adapter, pack=pack),
                           ckpt)
    prompts = [chat[:-1] for chat in val[:cfg.task_eval_size]] if data == TASK else []  # without the reply

    def batch(examples: list[list[dict]]) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = trim_padding(*sft_batch(tuned.tokenizer, examples, cfg.block_size, pack))  # (B, T)
        return inputs.to(tuned.device), targets.to(tuned.device)

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        indices = part_of(batch_indices(len(train), cfg.loop.batch_size, step, cfg.loop.seed), part, parts)
        inputs, targets = batch([train[i] for i in indices])
        return cross_entropy(tuned.model(inputs), targets), {}

    def validate() -> dict:  # mean loss per assistant token of the held-out chats
        nll, count = 0.0, 0
        for start in range(0, len(val), cfg.loop.batch_size):
            inputs, targets = batch(val[start:start + cfg.loop.batch_size])
            nll += cross_entropy(tuned.model(inputs), targets, reduction="sum").item()
            count += int((targets != IGNORE_INDEX).sum())
        return {"val_loss": nll / count} if count else {}

    def graded() -> dict:
        return task_score(tuned.model, tuned.tokenizer, prompts) if prompts else {}

    log_before(session, lambda: validate() | graded())
    finished = run_steps(session, step_loss, validate, stop_after, show_progress, ylabel="loss (nats/token)")
    return finish(session, tuned, finished, graded)


def load_chats(data: str, cfg: PostTrainConfig) -> list[list[dict]]:
    """The chats of a JSONL file, or for "task" the task's demonstrations (each question once)."""
    if data == TASK:
        return unique(task_examples(cfg.task_size, cfg.loop.seed, cfg.task_max_operand))
    return read_chats(data)
