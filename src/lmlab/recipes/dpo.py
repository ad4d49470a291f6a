"""Direct Preference Optimization: a policy learns from preference pairs, with no reward model.

Read top to bottom: preferences (a JSONL file of prompt + chosen/rejected, or prompt + ranked
answers, which become all their pairs; or the embedded addition task; or, with `sample_pairs`,
the best and worst of K replies the model itself samples for each prompt, graded by a reward
function: on-policy pairs) -> a training and a held-out part -> the model with a PEFT method applied -> per pair, log p(answer | prompt) of the
chosen and the rejected answer under the policy and under the reference (the model as training
starts) -> the DPO sigmoid loss (`losses.dpo`) -> AdamW steps, checkpoints that resume exactly ->
the adapter (for LoRA also the merged model) or the whole model.

The reference costs no second model: with a fresh adapter it is the same network with its
adapters switched off (`adapters_disabled`). Without PEFT (or when continuing a saved adapter)
the starting weights are gone once training moves them, so the reference log-probabilities of
every pair are computed once, before the first step, and kept in the checkpoints.

Logged: the implicit rewards' margin beta * (log-ratio chosen - log-ratio rejected), which should
grow, and the share of pairs it orders right; on the task, the reward of greedy replies to
held-out questions before and after.
"""

from pathlib import Path

import torch

from lmlab.data.tasks import preference_pairs
from lmlab.errors import LmlabError
from lmlab.losses.bradley_terry import pairwise_accuracy, ranked_pairs
from lmlab.losses.dpo import dpo_loss, sequence_logprobs
from lmlab.modules.peft import adapters_disabled
from lmlab.objectives.sft import sft_batch
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.finetune import (TASK, FinetuneConfig, FinetuneResult, batch_indices, finish, load_tunable,
                                     read_preferences, run_settings, split_examples, start_tuning, trim_padding,
                                     unique, with_reply)
from lmlab.training.loop import evaluated, log_before, part_of, run_steps
from lmlab.training.rewards import prompts_and_replies, reward_source, sampled_pairs
from lmlab.training.task_score import task_score

Pair = tuple[list[dict], str, str]  # (prompt messages, chosen answer, rejected answer)


def dpo(model: str | Path, data: str, out: str | Path, cfg: FinetuneConfig = FinetuneConfig(), beta: float = 0.1,
        sample_pairs: int = 0, sample_max_new_tokens: int = 32, sample_temperature: float = 1.0,
        sample_with_reference: bool = False, reward_fn: str | None = None,
        reward_model: str | Path | None = None, adapter: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
        device: str = "auto", show_progress: bool = True) -> FinetuneResult:
    """Align `model` (a zoo name, model or run directory, .gguf) with the preferences in `data` (a
    JSONL file, or "task") into the run directory `out`; `beta` scales the implicit reward (larger:
    stay closer to the reference). With `sample_pairs` = K, `data` holds prompts instead (as for
    PPO) and the pairs are made from K replies of at most `sample_max_new_tokens` tokens the model
    samples for each (at `sample_temperature`), graded by `reward_fn`
    or `reward_model` (on the task, its own reward); `sample_with_reference` adds the data's own
    reply for each prompt (the task's right answer) to the candidates. `adapter`, `stop_after` and `resume` work as
    for `recipes.sft.sft`."""
    if beta <= 0:
        raise LmlabError(f"--beta {beta} must be positive (0.1 is usual; larger keeps closer to the reference)")
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    if sample_pairs:
        rows = prompts_and_replies(data, cfg)
        score = reward_source(data, reward_fn, reward_model, cfg.block_size)
        train_rows, val_rows = split_examples(rows, cfg.val_fraction, cfg.seed)
        val_prompts = [prompt for prompt, _ in val_rows]
        tuned = load_tunable(model, cfg, adapter, device)
        train, val = (sampled_pairs(tuned.model, tuned.tokenizer, [prompt for prompt, _ in part], score, sample_pairs,
                                    sample_max_new_tokens, sample_temperature, seed=cfg.seed + i,
                                    references=[reply for _, reply in part] if sample_with_reference else None,
                                    show_progress=show_progress)
                      for i, part in enumerate((train_rows, val_rows)))
        if not train:
            raise LmlabError(f"none of the {sample_pairs} replies sampled per prompt differ in reward, so there "
                             "are no pairs; sample more replies (--sample-pairs) or use more prompts")
    else:
        pairs = load_pairs(data, cfg)
        train, val = split_examples(pairs, cfg.val_fraction, cfg.seed)
        val_prompts = unique([prompt for prompt, _, _ in val])
        tuned = load_tunable(model, cfg, adapter, device)
    settings = run_settings("dpo", tuned, data, train + val, cfg, adapter, beta=beta, sample_pairs=sample_pairs,
                            sample_max_new_tokens=sample_max_new_tokens, sample_temperature=sample_temperature,
                            sample_with_reference=sample_with_reference, reward_fn=reward_fn,
                            reward_model=str(reward_model) if reward_model else None)
    session = start_tuning(out, tuned.model, cfg, settings, ckpt)
    adapters_off_is_reference = tuned.method != "none" and adapter is None
    prompts = val_prompts[:cfg.task_eval_size] if data == TASK else []

    def logprobs(rows: list[Pair]) -> torch.Tensor:
        """log p(answer | prompt) of the chosen and the rejected answers: (B, 2)."""
        chosen = [with_reply(prompt, answer) for prompt, answer, _ in rows]
        rejected = [with_reply(prompt, answer) for prompt, _, answer in rows]
        inputs, targets = trim_padding(*sft_batch(tuned.tokenizer, chosen + rejected, cfg.block_size))  # (2B, T)
        logps = sequence_logprobs(tuned.model(inputs.to(tuned.device)), targets.to(tuned.device))  # (2B,)
        return logps.view(2, len(rows)).T  # (B, 2)

    def reference(rows: list[Pair], part: str, indices: list[int]) -> torch.Tensor:
        """The reference's log-probs (B, 2) of `rows`, examples `indices` of part train or val."""
        if adapters_off_is_reference:
            with torch.no_grad(), adapters_disabled(tuned.model):
                return logprobs(rows)
        return session.state["reference"][part][indices].to(tuned.device)

    def all_logprobs(rows: list[Pair]) -> torch.Tensor:  # (N, 2), in batches
        chunks = [logprobs(rows[i:i + cfg.batch_size]).cpu() for i in range(0, len(rows), cfg.batch_size)]
        return torch.cat(chunks) if chunks else torch.empty(0, 2)

    def preference_loss(rows: list[Pair], ref: torch.Tensor) -> tuple[torch.Tensor, dict]:
        policy = logprobs(rows)  # (B, 2)
        loss, chosen, rejected = dpo_loss(policy[:, 0], policy[:, 1], ref[:, 0], ref[:, 1], beta)
        margin, accuracy = (chosen - rejected).mean(), pairwise_accuracy(chosen, rejected)
        return loss, {"margin": margin.item(), "accuracy": accuracy.item()}

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        indices = part_of(batch_indices(len(train), cfg.batch_size, step, cfg.seed), part, parts)
        rows = [train[i] for i in indices]
        return preference_loss(rows, reference(rows, "train", indices))

    def validate() -> dict:  # held-out loss, margin and accuracy, averaged over the pairs
        totals = {"loss": 0.0, "margin": 0.0, "accuracy": 0.0}
        for start in range(0, len(val), cfg.batch_size):
            indices = list(range(start, min(start + cfg.batch_size, len(val))))
            rows = [val[i] for i in indices]
            loss, logged = preference_loss(rows, reference(rows, "val", indices))
            for name, value in ({"loss": loss.item()} | logged).items():
                totals[name] += value * len(rows)
        return {f"val_{name}": total / len(val) for name, total in totals.items()} if val else {}

    def graded() -> dict:
        return task_score(tuned.model, tuned.tokenizer, prompts) if prompts else {}

    if not adapters_off_is_reference and "reference" not in session.state:
        session.state["reference"] = evaluated(tuned.model, lambda: {"train": all_logprobs(train),
                                                                     "val": all_logprobs(val)})
    log_before(session, lambda: validate() | graded())
    finished = run_steps(session, step_loss, validate, stop_after, show_progress, ylabel="DPO loss")
    return finish(session, tuned, finished, graded)


def load_pairs(data: str, cfg: FinetuneConfig) -> list[Pair]:
    """(prompt, chosen, rejected) triples: a JSONL file's pairs, and every (better, worse) pair of
    its rankings; or for "task", the task's pairs (each question once)."""
    if data == TASK:
        pairs = preference_pairs(cfg.task_size, cfg.seed, cfg.task_max_operand)
        return unique(pairs, key=lambda pair: pair[0])
    pairs = []
    for prompt, answers in read_preferences(data):
        better, worse = ranked_pairs(len(answers))
        pairs += [(prompt, answers[i], answers[j]) for i, j in zip(better.tolist(), worse.tolist())]
    return pairs
