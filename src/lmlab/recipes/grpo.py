"""GRPO: PPO without a value head, each reply judged against the other replies to its prompt (DeepSeekMath,
DeepSeek-R1). The RL step for rewards a program can check.

Read top to bottom: prompts (a JSONL file of chats to reply to, or the embedded addition task) -> the
policy: the model with a PEFT method applied (or every weight training) -> every `iterations` steps a
rollout: `replies_per_prompt` (K) sampled replies to each of `batch_size` prompts, each scored once by the sum
of the rewards in use (`training.reward_mix`: the task's, a regex, the user's function, a reward model);
the group-relative advantage of each reply (`losses.grpo.group_advantages`); with kl_coef > 0 the log-probs
of the sampled tokens under the reference (the same network with its adapters off, or a frozen copy:
`training.preference.frozen_reference`) -> `iterations` optimizer steps on that rollout, each minimising
the clipped ratio loss + kl_coef * k3 KL to the reference, averaged per reply or per token (`grpo_loss`).

What PPO has and GRPO does not: a value head and its loss, GAE, the KL in the reward. What GRPO needs
instead: K replies per prompt, so a step samples batch_size x K replies.

A rollout is made from the step number alone (its prompts by `batch_indices`, its samples by a seed
derived from it) and kept in the checkpoint, so a resumed run continues exactly. Under torchrun every
process samples the whole rollout (same weights, same seed) and trains on its part of the replies.
Logged per step: reward (the weighted sum) and each source's mean, KL to the reference (per reply,
summed over its tokens, as PPO logs it), the loss's mean k3, the clip fraction, the share of groups
whose replies all scored the same (no signal), reply length; on the task, the greedy replies' reward
before and after.
"""

import dataclasses
from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.losses.cross_entropy import token_logprobs
from lmlab.losses.grpo import group_advantages, grpo_loss
from lmlab.losses.kl import kl_penalty
from lmlab.objectives.sft import response_batch
from lmlab.tokenizers.chat import chat_prompt
from lmlab.tokenizers.text import TextTokenizer
from lmlab.training import distributed
from lmlab.training.alignment_configs import GRPOConfig
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.loop import evaluated, log_before, part_of, run_steps
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
    unique,
)
from lmlab.training.preference import Logits, frozen_reference
from lmlab.training.reward_mix import RewardMix, reward_mix, score_replies
from lmlab.training.rewards import load_prompts
from lmlab.training.task_score import task_score


def grpo(model: str | Path, data: str, out: str | Path, cfg: PostTrainConfig = PostTrainConfig(),
         grpo_cfg: GRPOConfig = GRPOConfig(), reward_fn: str | None = None, reward_model: str | Path | None = None,
         reward_regex: str | None = None, task_reward: bool | None = None, reward_weights: dict | None = None,
         adapter: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
         device: str = "auto", show_progress: bool = True) -> PostTrainResult:
    """Optimise `model` (a zoo name, model or run directory, .gguf) with GRPO for the rewards named, on the
    prompts in `data` (a JSONL file of {"messages": [...]}, the reply left out, or "task"), into run
    directory `out`. The reward of a reply is the weighted sum (`reward_weights`: source -> weight) of
    `reward_regex` (1 when the reply matches it), `reward_fn` ("module:function" or "file.py:function":
    RUNS that file), the reward model of a `lmlab reward` run and the task's reward (`task_reward`; by
    default on the task when nothing else is named). `adapter`, `stop_after` and `resume` work as for
    `recipes.sft.sft`."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    prompts = load_prompts(data, cfg)
    mix = reward_mix(data, cfg.block_size, reward_fn, reward_model, reward_regex, task_reward, reward_weights)
    check_parts(cfg, grpo_cfg)
    train, val = split_examples(prompts, cfg.val_fraction, cfg.loop.seed)
    tuned = load_tunable(model, cfg, adapter, device)
    reference = frozen_reference(tuned, adapter) if grpo_cfg.kl_coef > 0 else None
    settings = run_settings("grpo", tuned, data, prompts, cfg, adapter, rewards=mix.describe,
                            reward_weights=mix.weights, **dataclasses.asdict(grpo_cfg))
    replies = cfg.loop.batch_size * grpo_cfg.replies_per_prompt  # a step's batch for memory and parts: its replies
    session = start_tuning(out, tuned.model, cfg.replace(loop=cfg.loop.replace(batch_size=replies)), settings, ckpt)

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        """GRPO's loss on part `part` of the step's rollout (every process samples all of it)."""
        index = step // grpo_cfg.iterations
        if session.state.get("rollout", {}).get("index") != index:
            rows = [train[i] for i in batch_indices(len(train), cfg.loop.batch_size, index, cfg.loop.seed)]
            session.state["rollout"] = evaluated(tuned.model, lambda: rollout(
                tuned.model, reference, tuned.tokenizer, rows, mix, grpo_cfg,
                seed=cfg.loop.seed * 1_000_003 + index) | {"index": index})
        batch = {key: part_of(value, part, parts) if torch.is_tensor(value) else value
                 for key, value in session.state["rollout"].items()}
        return policy_loss(tuned.model, batch, grpo_cfg)

    graded_prompts = unique(val)[:cfg.task_eval_size] if data == TASK else []

    def graded() -> dict:
        return task_score(tuned.model, tuned.tokenizer, graded_prompts) if graded_prompts else {}

    log_before(session, graded)
    finished = run_steps(session, step_loss, None, stop_after, show_progress,
                         curves={"reward": "reward", "KL to reference": "kl"}, ylabel="reward / KL (nats)")
    return finish(session, tuned, finished, graded)


def check_parts(cfg: PostTrainConfig, grpo_cfg: GRPOConfig) -> None:
    """The replies of a step must split into equal parts over the processes x --grad-accum."""
    parts = distributed.current().world_size * cfg.loop.grad_accum
    if (cfg.loop.batch_size * grpo_cfg.replies_per_prompt) % parts:
        raise LmlabError(f"--batch-size {cfg.loop.batch_size} x --replies-per-prompt {grpo_cfg.replies_per_prompt} "
                         f"replies must be a multiple of the processes x --grad-accum ({parts})")


def rollout(policy: torch.nn.Module, reference: Logits | None, tokenizer: TextTokenizer, prompts: list[list[dict]],
            mix: RewardMix, grpo_cfg: GRPOConfig, seed: int) -> dict:
    """Sample K replies to each prompt (at `seed`), score them, and compute what `policy_loss` trains on:
    the group advantages, the log-probs under the sampling policy (only when a rollout serves several
    steps; with one, the step's own log-probs are the old ones) and under the reference. Call it without
    gradients, in eval mode (`evaluated`)."""
    device = next(policy.parameters()).device
    K = grpo_cfg.replies_per_prompt
    queries = [tokenizer.encode(chat_prompt(tokenizer, prompt)) for prompt in prompts for _ in range(K)]
    config = GenerationConfig(max_new_tokens=grpo_cfg.max_new_tokens, temperature=grpo_cfg.temperature,
                              eos_id=tokenizer.stop_ids, seed=seed)
    replies = generate_batch(policy, queries, config, tokenizer)  # group g: rows g*K .. g*K + K - 1
    inputs, targets, mask = response_batch(queries, [r.sampled_ids for r in replies], tokenizer)  # (BK, T) each
    inputs, targets, mask = inputs.to(device), targets.to(device), mask.to(device)
    rewards, logged = score_replies(mix, [prompt for prompt in prompts for _ in range(K)], [r.text for r in replies])
    batch = {"inputs": inputs, "targets": targets, "mask": mask,
             "advantages": group_advantages(rewards, K, grpo_cfg.scale_rewards).to(device)}
    if grpo_cfg.iterations > 1 or reference is not None:
        old_logprobs = token_logprobs(policy(inputs) / grpo_cfg.temperature, targets)  # (BK, T)
        if grpo_cfg.iterations > 1:
            batch["old_logprobs"] = old_logprobs
    if reference is not None:
        batch["ref_logprobs"] = token_logprobs(reference(inputs) / grpo_cfg.temperature, targets)  # (BK, T)
        per_token = torch.where(mask.bool(), kl_penalty(old_logprobs, batch["ref_logprobs"]), 0.0)  # (BK, T)
        logged["kl"] = per_token.sum(1).mean().item()  # per reply, as PPO logs it
    groups = rewards.view(-1, K)  # (B, K)
    flat = (groups == groups[:, :1]).all(dim=1)  # (B,) groups whose replies all scored the same: no signal
    batch["logged"] = logged | {"reward": rewards.mean().item(), "reward_std": groups.std(1).mean().item(),
                                "flat_groups": flat.float().mean().item(),
                                "reply_tokens": mask.sum(1).float().mean().item()}
    return batch


def policy_loss(policy: torch.nn.Module, batch: dict, grpo_cfg: GRPOConfig) -> tuple[torch.Tensor, dict]:
    """`grpo_loss` on (a part of) a rollout, and what is logged: the rollout's own measures, the clip
    fraction and the loss's mean k3 KL."""
    logprobs = token_logprobs(policy(batch["inputs"]) / grpo_cfg.temperature, batch["targets"])  # (B, T)
    old_logprobs = batch.get("old_logprobs", logprobs.detach())
    loss, logged = grpo_loss(logprobs, old_logprobs, batch.get("ref_logprobs"), batch["advantages"], batch["mask"],
                             grpo_cfg.clip, grpo_cfg.kl_coef, grpo_cfg.average)
    return loss, batch["logged"] | logged
